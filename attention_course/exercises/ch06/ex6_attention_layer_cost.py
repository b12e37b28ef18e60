r"""ch06_ex6: What a multi-head layer costs.

Account for the efficient layer of this chapter, `mh.MultiHeadAttention(d_in, d_out,
context_length, dropout, num_heads, qkv_bias)`, on a batch of `batch` sequences of `num_tokens`
tokens, without running it. Write `attention_layer_cost(batch, num_tokens, d_in, d_out, num_heads,
qkv_bias)` (Python `int`s and a `bool`; `d_out` divisible by `num_heads`) that returns a `dict` with
exactly these keys, each value a Python `int`:

- `"parameters"`: the number of parameters of the layer (the three projections `W_query`, `W_key`,
  `W_value`, with biases only when `qkv_bias` is true, and `out_proj`, which has a bias);
- `"weights_elements"`: the number of entries of the attention weights of one forward pass, the
  tensor of shape `(batch, num_heads, num_tokens, num_tokens)`;
- `"multiply_adds"`: the multiply-adds of one forward pass in its four matrix products: the three
  projections, the scores of every head, the weighted sums of the values of every head, and the
  output projection. (A product of an `(m, k)` matrix by a `(k, n)` one takes `m * k * n`
  multiply-adds; leave out the softmax, the scaling, the mask and the biases.)
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def attention_layer_cost(batch, num_tokens, d_in, d_out, num_heads, qkv_bias):
    """Parameters, entries of the weights and multiply-adds, from the shapes alone."""
    head_dim = d_out // num_heads
    parameters = 3 * d_in * d_out + (3 * d_out if qkv_bias else 0) + d_out * d_out + d_out
    weights_elements = batch * num_heads * num_tokens * num_tokens
    projections = 3 * batch * num_tokens * d_in * d_out
    scores = batch * num_heads * num_tokens * head_dim * num_tokens
    pooling = batch * num_heads * num_tokens * num_tokens * head_dim
    output = batch * num_tokens * d_out * d_out
    return {"parameters": parameters, "weights_elements": weights_elements,
            "multiply_adds": projections + scores + pooling + output}


# Inputs of the public and hidden checks ---------------------------------------------------


def _gpt2_calls(seed):
    """The page's benchmark layer: d_model 768, 12 heads, 1024 tokens (weights of 48 MB in float32)."""
    return [Call(args=(1, 1024, 768, 768, 12, True))]


def _small_calls(seed):
    return [Call(args=(2, 6, 8, 8, 4, False)), Call(args=(1, 3, 4, 6, 2, True))]


def _shapes_calls(seed):
    return [Call(args=(3, 5, 10, 12, 1, False)), Call(args=(3, 5, 10, 12, 6, False)),
            Call(args=(1, 1, 2, 4, 4, True))]


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(3):
        heads = randint(g, 1, 8)
        calls.append(Call(args=(randint(g, 1, 8), randint(g, 1, 300), randint(g, 1, 64),
                                heads * randint(g, 1, 16), heads, bool(randint(g, 0, 1)))))
    return calls


# Kept mistakes, each with its hint --------------------------------------------------------


def _cost_variant(out_proj=True, qkv_bias_counted=True, out_bias=True, heads_in_weights=True,
                  score_width="d_out", projections=3, qkv_bias_always=False):
    def cost(batch, num_tokens, d_in, d_out, num_heads, qkv_bias):
        head_dim = d_out // num_heads
        width = {"head_dim": head_dim, "d_out per head": num_heads * d_out}.get(score_width, d_out)
        with_bias = (qkv_bias or qkv_bias_always) and qkv_bias_counted
        parameters = projections * d_in * d_out + (3 * d_out if with_bias else 0)
        if out_proj:
            parameters += d_out * d_out + (d_out if out_bias else 0)
        weights_elements = batch * (num_heads if heads_in_weights else 1) * num_tokens * num_tokens
        multiply_adds = (projections * batch * num_tokens * d_in * d_out + 2 * batch * num_tokens ** 2 * width
                         + (batch * num_tokens * d_out * d_out if out_proj else 0))
        return {"parameters": parameters, "weights_elements": weights_elements, "multiply_adds": multiply_adds}
    return cost


mistakes.add("output projection left out",
             "the layer ends with out_proj, a (d_out, d_out) matrix with a bias: it adds d_out * d_out + d_out "
             "parameters and batch * num_tokens * d_out * d_out multiply-adds.",
             _cost_variant(out_proj=False))
mistakes.add("one head's scores and sums only",
             "the scores and the weighted sums were counted for one head of width head_dim; every one of the "
             "num_heads heads does its own, so together they take the width d_out.",
             _cost_variant(score_width="head_dim"))
mistakes.add("weights of one head",
             "the attention weights have one (num_tokens, num_tokens) matrix per head and per sequence: "
             "batch * num_heads * num_tokens * num_tokens entries.",
             _cost_variant(heads_in_weights=False))
mistakes.add("query, key and value biases left out",
             "with qkv_bias the three projections have a bias each: 3 * d_out more parameters.",
             _cost_variant(qkv_bias_counted=False))
mistakes.add("every head's products at width d_out",
             "each head's scores and weighted sums were counted at the width d_out; a head works on its own "
             "head_dim = d_out / num_heads features, so the num_heads heads together take the width d_out, "
             "not num_heads * d_out.",
             _cost_variant(score_width="d_out per head"))
mistakes.add("query, key and value biases always counted",
             "the three projections have biases only when qkv_bias is True; without it they add no parameters.",
             _cost_variant(qkv_bias_always=True))
mistakes.add("output bias left out",
             "out_proj has a bias (d_out parameters) whether or not qkv_bias is set.",
             _cost_variant(out_bias=False))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("the package's layer on the meta device",
                   "parameters counted on mh.MultiHeadAttention built on the meta device (no memory); the rest "
                   "from the shapes of each matrix product")
def _cost_alt_meta(batch, num_tokens, d_in, d_out, num_heads, qkv_bias):
    from ... import multihead as mh
    with torch.device("meta"):
        layer = mh.MultiHeadAttention(d_in, d_out, max(num_tokens, 1), 0.0, num_heads=num_heads, qkv_bias=qkv_bias)
    parameters = sum(p.numel() for p in layer.parameters())

    def matmul(m, k, n):
        return m * k * n

    head_dim = d_out // num_heads
    rows = batch * num_tokens
    macs = (3 * matmul(rows, d_in, d_out) + batch * num_heads * (matmul(num_tokens, head_dim, num_tokens)
                                                                 + matmul(num_tokens, num_tokens, head_dim))
            + matmul(rows, d_out, d_out))
    return {"parameters": int(parameters), "weights_elements": batch * num_heads * num_tokens ** 2,
            "multiply_adds": int(macs)}


@alternatives.keep("a loop over heads", "per-head costs summed in a loop, parameters listed layer by layer")
def _cost_alt_loop(batch, num_tokens, d_in, d_out, num_heads, qkv_bias):
    head_dim = d_out // num_heads
    layers = [(d_in, d_out, qkv_bias)] * 3 + [(d_out, d_out, True)]
    parameters = sum(fan_in * fan_out + (fan_out if bias else 0) for fan_in, fan_out, bias in layers)
    macs = sum(batch * num_tokens * fan_in * fan_out for fan_in, fan_out, _ in layers)
    weights = 0
    for _ in range(num_heads):
        weights += batch * num_tokens * num_tokens
        macs += 2 * batch * num_tokens * num_tokens * head_dim
    return dict(parameters=parameters, weights_elements=weights, multiply_adds=macs)


@alternatives.keep("FLOPs halved, in float then int",
                   "FLOPs counted as 2 per multiply-add in floating point, halved and converted back to int")
def _cost_alt_flops(batch, num_tokens, d_in, d_out, num_heads, qkv_bias):
    flops = 2.0 * batch * num_tokens * (3 * d_in * d_out + 2 * num_tokens * d_out + d_out * d_out)
    parameters = float(d_out) * (3 * d_in + d_out + 1 + (3 if qkv_bias else 0))
    return {"multiply_adds": int(round(flops / 2)), "parameters": int(round(parameters)),
            "weights_elements": int(batch * num_heads * num_tokens ** 2)}


# Registration -----------------------------------------------------------------------------

_HINT = ("this check compares the three counts exactly (Python ints); the reason above names the first key that "
         "differs: list the layer's matrices and matrix products with their shapes and add them up.")

register(Exercise(
    label="ch06_ex6", title="What a multi-head layer costs",
    name="attention_layer_cost", reference=attention_layer_cost, points=2,
    checks=[
        Check("the page's benchmark layer: d_model 768, 12 heads, 1024 tokens, with biases (48 MB of weights)",
              _gpt2_calls, hint=_HINT, rtol=0.0, atol=0.0),
        Check("two small layers, with and without biases", _small_calls, hint=_HINT, rtol=0.0, atol=0.0),
        Check("d_in differs from d_out; 1 head, 6 heads, and a single token", _shapes_calls, hint=_HINT,
              rtol=0.0, atol=0.0),
        Check("random sizes (hidden)", _hidden_calls, public=False, hint=_HINT, rtol=0.0, atol=0.0),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
