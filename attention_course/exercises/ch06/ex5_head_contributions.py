r"""ch06_ex5: What each head adds to the output.

The layer merges its heads and then applies one output projection. That projection is linear,
so its output splits into one term per head plus the bias: the term of head $h$ is head $h$'s
context multiplied by the columns of `out_proj.weight` that meet head $h$'s features. This is
how the output of a layer is attributed to its heads. Write `head_contributions(layer, x)`.

- `layer`: this chapter's `mh.MultiHeadAttention(d_in, d_out, context_length, dropout,
  num_heads, qkv_bias)` (float32, `head_dim = d_out // num_heads`, with or without `qkv_bias`,
  one head or several), in training or evaluation mode; `x`: a float32 tensor of shape
  `(batch, num_tokens, d_in)` with `num_tokens <= context_length`.
- Return a float32 tensor of shape `(batch, num_heads, num_tokens, d_out)`. Entry `[b, h]`
  is head `h`'s causal context (features `h * head_dim` to `(h + 1) * head_dim - 1` of the
  merged heads of sequence `b`) times columns `h * head_dim` to `(h + 1) * head_dim - 1` of
  `layer.out_proj.weight`, applied as `nn.Linear` applies its weight, **without** the bias of
  `out_proj`. So `head_contributions(layer, x).sum(dim=1) + layer.out_proj.bias` equals
  `layer(x)` in evaluation mode.
- Compute as in evaluation mode (no dropout) whatever the layer's mode, and leave the layer in
  the mode it came in: the checks pass a layer in training mode with dropout 0.5.
- Raise `ValueError` naming `x` and giving its shape when `x` is not 3-D or its last size is
  not the layer's `d_in`.

When your function passes, answer in a markdown cell: why can a layer's output be split into a
sum over heads at the output projection, but not after a nonlinearity (the feed-forward network
of Chapter 8, say)?
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from ...checks.calls import MODULE_KEY
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, qkv_state, randint, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate(layer, x):
    d_in = layer.W_query.in_features
    if x.dim() != 3 or x.shape[-1] != d_in:
        raise ValueError(f"x must have shape (batch, num_tokens, d_in={d_in}), got x of shape {tuple(x.shape)}")


def head_contributions(layer, x):
    """Each head's context through its column block of out_proj.weight, no dropout, no bias."""
    _validate(layer, x)
    batch, num_tokens, _ = x.shape
    heads, head_dim = layer.num_heads, layer.head_dim

    def split(t):
        return t.view(batch, num_tokens, heads, head_dim).transpose(1, 2)

    q, k, v = split(layer.W_query(x)), split(layer.W_key(x)), split(layer.W_value(x))
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(1)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(head_dim)).masked_fill(future, float("-inf"))
    context = torch.softmax(scores, dim=-1) @ v                              # (b, heads, n, head_dim)
    d_out = layer.out_proj.out_features
    # blocks[h] = (columns of head h of out_proj.weight) transposed: (heads, head_dim, d_out)
    blocks = layer.out_proj.weight.view(d_out, heads, head_dim).permute(1, 2, 0)
    return context @ blocks


# Inputs of the public and hidden checks ---------------------------------------------------


def _layer(g, d_in, d_out, context_length, dropout, num_heads, qkv_bias, train):
    """A mh.MultiHeadAttention as plain data (calls.MODULE_KEY): each call builds its own."""
    state = qkv_state(g, d_in, d_out, qkv_bias)
    state["out_proj.weight"] = torch.randn(d_out, d_out, generator=g) / math.sqrt(d_out)
    state["out_proj.bias"] = torch.randn(d_out, generator=g) * 0.5
    return {MODULE_KEY: "multihead.MultiHeadAttention",
            "init_args": (d_in, d_out, context_length, dropout, num_heads),
            "init_kwargs": {"qkv_bias": qkv_bias}, "state_dict": state, "train": train}


_MODES = ("module_args_training",)


def _main_calls(seed):
    g = gen(seed)
    layer = _layer(g, 4, 6, 6, 0.0, 3, False, False)
    return [Call(args=(layer, torch.randn(2, 5, 4, generator=g)), report=_MODES)]


def _train_calls(seed):
    g = gen(seed)
    layer = _layer(g, 5, 8, 7, 0.5, 4, True, True)
    return [Call(args=(layer, torch.randn(2, 6, 5, generator=g)), call_seed=seed + 1, report=_MODES)]


def _one_head_calls(seed):
    g = gen(seed)
    layer = _layer(g, 3, 4, 5, 0.0, 1, True, False)
    return [Call(args=(layer, torch.randn(3, 4, 3, generator=g)), report=_MODES)]


def _causal_calls(seed):
    g = gen(seed)
    layer = _layer(g, 4, 6, 8, 0.0, 2, False, False)
    x = torch.randn(1, 6, 4, generator=g)
    later = x.clone()
    later[:, 3:] = torch.randn(1, 3, 4, generator=g) * 3
    return [Call(args=(layer, x), report=_MODES), Call(args=(layer, later), report=_MODES)]


def _bad_calls(seed):
    g = gen(seed)
    layer = _layer(g, 4, 6, 6, 0.0, 3, False, False)
    return [Call(args=(layer, torch.randn(1, 3, 4, generator=g))),
            Call(args=(layer, torch.randn(1, 3, 5, generator=g))),
            Call(args=(layer, torch.randn(3, 4, generator=g))),
            Call(args=(layer, torch.randn(1, 1, 3, 4, generator=g)))]


def _bad_words(call):
    return ["x", shape_of(call.args[1])]


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for train in (True, False):
        heads, head_dim = randint(g, 1, 4), randint(g, 1, 3)
        d_in, context_length = randint(g, 2, 6), randint(g, 3, 8)
        num_tokens, batch = randint(g, 2, context_length), randint(g, 1, 3)
        bias = bool(randint(g, 0, 1))
        p = round(0.2 + 0.6 * torch.rand((), generator=g).item(), 3) if train else 0.0
        layer = _layer(g, d_in, heads * head_dim, context_length, p, heads, bias, train)
        calls.append(Call(args=(layer, torch.randn(batch, num_tokens, d_in, generator=g)),
                          call_seed=seed % 1000, report=_MODES))
    return calls


# Kept mistakes, each with its hint --------------------------------------------------------


def _contribution_variant(out_rows=False, bias_in_each=False, direct_view=False, causal=True,
                          scale_by_d_out=False, dropout=False, leave_in_eval=False):
    """A head_contributions that is wrong in exactly the way switched on."""

    def variant(layer, x):
        _validate(layer, x)
        b, n, _ = x.shape
        h, hd, d_out = layer.num_heads, layer.head_dim, layer.out_proj.out_features
        if leave_in_eval:
            layer.eval()

        def split(t):
            return t.reshape(b, h, n, hd) if direct_view else t.reshape(b, n, h, hd).transpose(1, 2)

        q, k, v = split(layer.W_query(x)), split(layer.W_key(x)), split(layer.W_value(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_out if scale_by_d_out else hd)
        if causal:
            scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        context = (layer.dropout(weights) if dropout else weights) @ v
        weight = layer.out_proj.weight
        parts = []
        for head in range(h):
            cols = slice(head * hd, (head + 1) * hd)
            block = weight[cols, :] if out_rows else weight[:, cols].T
            part = context[:, head] @ block
            parts.append(part + layer.out_proj.bias if bias_in_each else part)
        return torch.stack(parts, dim=1)

    return variant


mistakes.add("rows of out_proj.weight instead of columns",
             "each head's context met a block of rows of out_proj's weight; that weight is stored "
             "(out_features, in_features), so the features of head h are the inputs that meet its "
             "columns h * head_dim to (h + 1) * head_dim - 1, each column giving one input's effect on "
             "every output feature.",
             _contribution_variant(out_rows=True))

mistakes.add("out_proj's bias in every head",
             "each head's contribution carries out_proj's bias, so the heads sum to the output plus "
             "num_heads - 1 extra biases; the bias belongs to no head and stays out of every contribution.",
             _contribution_variant(bias_in_each=True))

mistakes.add("heads split with a direct view",
             "the projections were reshaped straight to (batch, heads, tokens, head_dim): the right shape, "
             "but each head then mixes the features of different tokens; the feature axis is the one to "
             "split, and the heads axis then moves before the tokens.",
             _contribution_variant(direct_view=True))

mistakes.add("no causal mask",
             "each token's contribution depends on later tokens, as when the heads attend to the future; "
             "the layer hides every key after the query (its causal mask) before the softmax.",
             _contribution_variant(causal=False))

mistakes.add("scaled by sqrt(d_out)",
             "the scores were divided by the square root of d_out; each head's scores are dot products "
             "of head_dim features, and the layer divides them by the square root of head_dim.",
             _contribution_variant(scale_by_d_out=True))

mistakes.add("dropout applied in training mode",
             "with the layer in training mode your contributions are those of a random draw of dropout "
             "on the attention weights; the contract asks for the contributions of evaluation mode "
             "(no dropout) whatever the layer's mode.",
             _contribution_variant(dropout=True))

mistakes.add("layer left in evaluation mode",
             "the values are right, but the layer came in training mode and left in evaluation mode; "
             "the layer's mode after the call is the mode it came in.",
             _contribution_variant(leave_in_eval=True))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("loop over heads in float64",
                   "row blocks of the three projections and column blocks of out_proj, one head at a "
                   "time, in float64; tril mask")
def _contrib_alt_loop64(layer, x):
    if x.ndim != 3 or x.size(2) != layer.W_query.weight.size(1):
        raise ValueError(f"expected x of shape (batch, num_tokens, {layer.W_query.weight.size(1)}), "
                         f"got {list(x.shape)} for x")
    x64, hd, n = x.double(), layer.head_dim, x.size(1)
    seen = torch.tril(torch.ones(n, n)).bool()
    parts = []
    for h in range(layer.num_heads):
        rows = slice(h * hd, (h + 1) * hd)
        q, k, v = (F.linear(x64, lin.weight[rows].double(),
                            None if lin.bias is None else lin.bias[rows].double())
                   for lin in (layer.W_query, layer.W_key, layer.W_value))
        scores = torch.where(seen, q @ k.mT / hd ** 0.5, torch.tensor(-math.inf, dtype=torch.float64))
        parts.append(torch.softmax(scores, -1) @ v @ layer.out_proj.weight[:, rows].double().T)
    return torch.stack(parts, 1).to(x.dtype)


@alternatives.keep("the layer's own weights and einsum",
                   "layer(x, return_weights=True) for the weights before dropout, einsum with "
                   "out_proj.weight unflattened into (d_out, heads, head_dim)")
def _contrib_alt_einsum(layer, x):
    if x.dim() != 3 or x.shape[2] != layer.W_value.in_features:
        raise ValueError(f"x has shape {tuple(x.shape)}; x must be (batch, num_tokens, "
                         f"{layer.W_value.in_features})")
    _, weights = layer(x, return_weights=True)                              # (b, heads, n, n)
    values = layer.W_value(x).unflatten(-1, (layer.num_heads, layer.head_dim))   # (b, n, heads, hd)
    context = torch.einsum("bhqk,bkhd->bhqd", weights, values)
    per_head = layer.out_proj.weight.unflatten(1, (layer.num_heads, layer.head_dim))
    return torch.einsum("bhqd,ohd->bhqo", context, per_head)


@alternatives.keep("the layer with the other heads' values zeroed",
                   "a deep copy of the layer in eval mode per head, with the value rows (and biases) of "
                   "every other head set to zero; its output minus out_proj's bias")
def _contrib_alt_zeroed(layer, x):
    if len(x.shape) != 3 or x.shape[-1] != layer.W_key.in_features:
        raise ValueError(f"bad x: shape {tuple(x.shape)} is not (batch, num_tokens, d_in)")
    outputs = []
    for h in range(layer.num_heads):
        alone = copy.deepcopy(layer).eval()
        keep = torch.zeros(layer.W_value.out_features, dtype=torch.bool)
        keep[h * layer.head_dim:(h + 1) * layer.head_dim] = True
        with torch.no_grad():
            alone.W_value.weight[~keep] = 0.0
            if alone.W_value.bias is not None:
                alone.W_value.bias[~keep] = 0.0
            outputs.append(alone(x) - alone.out_proj.bias)
    return torch.stack(outputs, dim=1)


@alternatives.keep("SDPA and a feature mask per head",
                   "F.scaled_dot_product_attention(is_causal=True) on unflattened heads, the merged "
                   "context masked to one head's features, then F.linear without bias")
def _contrib_alt_sdpa(layer, x):
    if x.dim() != 3 or x.shape[-1] != layer.W_query.in_features:
        raise ValueError(f"x of shape {tuple(x.shape)} does not end in d_in={layer.W_query.in_features}")
    q, k, v = (lin(x).unflatten(-1, (layer.num_heads, -1)).transpose(1, 2)
               for lin in (layer.W_query, layer.W_key, layer.W_value))
    merged = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(2)
    owner = torch.arange(merged.shape[-1]) // layer.head_dim                     # head of each feature
    onehot = (owner == torch.arange(layer.num_heads)[:, None]).to(merged.dtype)   # (heads, d_out)
    return F.linear(merged[:, None] * onehot[:, None, :], layer.out_proj.weight)


# Registration -----------------------------------------------------------------------------

_HINT = ("this check builds an mh.MultiHeadAttention with given weights and compares your contributions, "
         "one (num_tokens, d_out) block per head; two self-tests: the blocks summed over heads plus "
         "out_proj's bias give layer(x) in eval mode, and head h's block is the eval-mode output of the "
         "layer with every other head's value features set to zero, minus out_proj's bias.")

register(Exercise(
    label="ch06_ex5", title="What each head adds to the output",
    name="head_contributions", reference=head_contributions, points=3, kind="function",
    checks=[
        Check("3 heads of 2 (d_in=4, d_out=6), eval mode, 2 sequences of 5 tokens", _main_calls, hint=_HINT),
        Check("training mode with dropout=0.5 and qkv_bias: eval-mode contributions, mode kept",
              _train_calls, seed=1,
              hint=_HINT + " Here the layer comes in training mode with dropout 0.5, and the check also "
                           "compares the layer's mode after the call."),
        Check("one head (num_heads=1) with qkv_bias, eval mode", _one_head_calls, seed=2,
              hint=_HINT + " With one head, its block is out_proj's output without the bias."),
        Check("the same first 3 tokens with other later tokens (2 heads of 3)", _causal_calls, seed=3,
              hint=_HINT + " The two calls share their first 3 tokens, so their first 3 rows agree."),
        Check("x not 3-D, or whose last size is not d_in, raises ValueError naming x and its shape (hidden)",
              _bad_calls, seed=4, public=False, must_mention=_bad_words, weight=ERROR_WEIGHT,
              hint="the first call is valid; the next pass x of shape (1, 3, 5) to a layer with d_in=4, then a "
                   "2-D x (3, 4) and a 4-D x (1, 1, 3, 4); each ValueError names x and gives its shape."),
        Check("random sizes, qkv_bias, modes and dropout (hidden)", _hidden_calls, seed=5, public=False,
              hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
