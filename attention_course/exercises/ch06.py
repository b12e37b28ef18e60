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
  student creates the layers does not matter, but their names and shapes do.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..registry import Call, Check, Exercise, Mistake, register


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


def _split_checked(body):
    def impl(x, num_heads):
        if x.dim() != 3:
            raise ValueError(f"x must be 3-D, got x of shape {tuple(x.shape)}")
        batch, num_tokens, d_out = x.shape
        return body(x, batch, num_tokens, num_heads, _head_dim(d_out, num_heads))
    return impl


_SPLIT_HINT = ("feature h * head_dim + i of a token belongs to head h; group the last axis into "
               "(num_heads, head_dim), then bring the heads axis in front of the tokens.")

register(Exercise(
    label="ch06_ex1", title="Splitting the features into heads", name="split_heads",
    reference=split_heads, points=1,
    checks=[
        Check("d_out=6 into 2 heads (an arange input) and into 3 heads", _split_small_calls, hint=_SPLIT_HINT),
        Check("one head, and as many heads as features", _split_edge_calls, hint=_SPLIT_HINT),
        Check("d_out not divisible by num_heads raises ValueError naming both and their values",
              _split_bad_calls, must_mention=_mention_sizes(),
              hint="check d_out % num_heads before reshaping and give d_out, num_heads and their values "
                   "in the message."),
        Check("random sizes (hidden)", _split_hidden_calls, public=False, hint=_SPLIT_HINT),
        Check("another indivisible d_out (hidden)", _split_hidden_bad_calls, public=False,
              must_mention=_mention_sizes(),
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


_MERGE_HINT = ("head h's features must land in columns h * head_dim ... (h + 1) * head_dim - 1 of each "
               "token: bring the tokens axis back in front of the heads axis, then flatten the last two axes.")

register(Exercise(
    label="ch06_ex2", title="Merging the heads back", name="merge_heads",
    reference=merge_heads, points=1,
    checks=[
        Check("2 heads of 3 tokens (an arange input), a random batch, a non-contiguous input", _merge_small_calls,
              hint=_MERGE_HINT),
        Check("a 3-D or 5-D input raises ValueError naming x and its shape", _merge_bad_calls,
              must_mention=lambda call: ["x", str(tuple(call.args[0].shape))],
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
    return [Call(init_args=(d_in, d_out, ctx, 0.5, heads), init_seed=seed, state_dict=_mha_state(g, d_in, d_out),
                 train=False, args=(torch.randn(2, ctx, d_in, generator=g),),
                 report=("param_shapes", "buffer_names"))]


def _mha_short_calls(seed):
    g = _gen(seed)
    d_in, d_out, ctx, heads = 5, 8, 8, 4
    state = _mha_state(g, d_in, d_out)
    return [Call(init_args=(d_in, d_out, ctx, 0.0, heads), init_seed=seed, state_dict=state, train=False,
                 args=(torch.randn(2, n, d_in, generator=g),)) for n in (3, 1)]


def _mha_train_calls(seed):
    g = _gen(seed)
    d_in, d_out, ctx, heads = 4, 6, 5, 2
    return [Call(init_args=(d_in, d_out, ctx, 0.4, heads), init_seed=seed, state_dict=_mha_state(g, d_in, d_out),
                 train=True, call_seed=seed, args=(torch.randn(2, ctx, d_in, generator=g),))]


def _mha_indivisible_calls(seed):
    g = _gen(seed)
    return [Call(init_args=(4, 10, 6, 0.0, 4), init_seed=seed, args=(torch.randn(1, 3, 4, generator=g),))]


def _mha_too_long_calls(seed):
    g = _gen(seed)
    return [Call(init_args=(3, 4, 4, 0.0, 2), init_seed=seed, state_dict=_mha_state(g, 3, 4), train=False,
                 args=(torch.randn(1, 6, 3, generator=g),))]


def _mha_hidden_calls(seed):
    g = _gen(seed)
    heads, head_dim = _randint(g, 2, 4), _randint(g, 1, 3)
    d_in, d_out = _randint(g, 2, 6), heads * head_dim
    ctx = _randint(g, 4, 9)
    n = _randint(g, 2, ctx)
    return [Call(init_args=(d_in, d_out, ctx, 0.3, heads), init_kwargs={"qkv_bias": True}, init_seed=seed,
                 state_dict=_mha_state(g, d_in, d_out, bias=True), train=False,
                 args=(torch.randn(3, n, d_in, generator=g),), grads_of=(0,),
                 report=("param_shapes", "buffer_names"))]


def _mha_hidden_bad_calls(seed):
    g = _gen(seed)
    heads = _randint(g, 3, 5)
    d_out = heads * _randint(g, 1, 3) + _randint(g, 1, heads - 1)
    return [Call(init_args=(3, d_out, 5, 0.0, heads), init_seed=seed, args=(torch.randn(1, 2, 3, generator=g),))]


def _mha_variant(head_dim_is_d_out=False, split="correct", merge="correct", scale_by="head_dim",
                 use_out_proj=True, divisibility_check=True):
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
            self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1),
                                 persistent=False)

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
            scale = math.sqrt(hd if scale_by == "head_dim" else self.d_out)
            scores = (q @ k.transpose(2, 3) / scale).masked_fill(self.mask[:n, :n], float("-inf"))
            ctx = self.dropout(torch.softmax(scores, dim=-1)) @ v
            if split == "no transpose":
                ctx = ctx.reshape(b, n, h * hd)
            elif merge == "interleaved":
                ctx = ctx.permute(0, 2, 3, 1).reshape(b, n, h * hd)
            else:
                ctx = ctx.transpose(1, 2).reshape(b, n, h * hd)
            return self.out_proj(ctx) if use_out_proj else ctx

    return Variant


_MHA_HINT = ("project once, split the features into heads, score each head with its own queries and keys "
             "scaled by the square root of head_dim, mask the future, softmax over the keys, weight the "
             "values, merge the heads back in order, then apply out_proj.")

register(Exercise(
    label="ch06_ex3", title="The efficient multi-head attention layer", name="MultiHeadAttention",
    reference=MultiHeadAttention, points=3, kind="class",
    checks=[
        Check("3 heads of 2 (d_in=4, d_out=6), 2 sequences of 5 tokens, eval mode (parameters, buffer)",
              _mha_main_calls, hint=_MHA_HINT),
        Check("4 heads of 2 on inputs shorter than context_length (3 and 1 of 8 tokens)", _mha_short_calls,
              hint="a sequence may be shorter than context_length: use the top-left block of the mask "
                   "that matches num_tokens."),
        Check("training mode: dropout on the attention weights (seeded)", _mha_train_calls,
              hint="apply the module's dropout once, to the attention weights of all heads, after the softmax."),
        Check("d_out=10 with num_heads=4 raises ValueError naming d_out and num_heads and their values",
              _mha_indivisible_calls, must_mention=_mention_sizes(),
              hint="check d_out % num_heads in __init__ and give d_out, num_heads and their values in the "
                   "message."),
        Check("num_tokens > context_length raises ValueError naming both", _mha_too_long_calls,
              must_mention=["num_tokens", "context_length"],
              hint="compare num_tokens with context_length at the start of forward and raise ValueError."),
        Check("random sizes with qkv_bias=True, and gradients (hidden)", _mha_hidden_calls, public=False,
              hint=_MHA_HINT),
        Check("another indivisible d_out (hidden)", _mha_hidden_bad_calls, public=False,
              must_mention=_mention_sizes(),
              hint="check d_out % num_heads in __init__ and give d_out, num_heads and their values in the "
                   "message."),
    ],
    mistakes=[
        Mistake("head_dim = d_out",
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


_FUSE_HINT = ("rows 0 ... d_out - 1 are the efficient layer's query projection, in which head h owns rows "
              "h * head_dim ... (h + 1) * head_dim - 1; then come the keys, then the values.")

register(Exercise(
    label="ch06_ex4", title="From per-head weights to one fused projection", name="fuse_head_weights",
    reference=fuse_head_weights, points=1,
    checks=[
        Check("3 heads of size 2 from d_in=4", _fuse_main_calls, hint=_FUSE_HINT),
        Check("mismatched or non-3-D shapes raise ValueError naming all three arguments", _fuse_bad_calls,
              must_mention=["query_weights", "key_weights", "value_weights"],
              hint="compare the three shapes (and that each is 3-D) before stacking, and name the three "
                   "arguments in the message."),
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
                "weights of different shapes must raise ValueError naming query_weights, key_weights and "
                "value_weights, not be stacked anyway or fail with an unclear error.",
                lambda q, k, v: torch.cat([w.reshape(-1, w.shape[-1]) for w in (q, k, v)])),
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


_PM_HINT = ("score each head with its own queries and keys scaled by the square root of head_dim, hide "
            "the keys where that head's mask is True before the softmax, and give a query that sees no "
            "key all-zero weights.")

register(Exercise(
    label="ch06_ex5", title="A different mask for every head", name="per_head_masked_attention",
    reference=per_head_masked_attention, points=2,
    checks=[
        Check("2 heads: one causal, one that sees only the current and the previous token", _pm_main_calls,
              hint=_PM_HINT),
        Check("queries that see no key get all-zero weights and a zero output", _pm_empty_rows_calls,
              hint="a query whose keys are all hidden must get weights of exactly 0 (not NaN, not uniform)."),
        Check("a mask of the wrong shape raises ValueError naming mask and its shape", _pm_bad_calls,
              must_mention=lambda call: ["mask", str(tuple(call.args[3].shape))],
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
        Mistake("no mask shape check",
                "a mask that is not (num_heads, num_queries, num_keys) must raise ValueError naming mask and "
                "its shape; a (num_queries, num_keys) mask would otherwise be broadcast silently.",
                _pm_no_check),
    ],
))
