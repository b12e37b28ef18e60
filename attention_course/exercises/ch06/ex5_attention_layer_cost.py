r"""ch06_ex5: What a multi-head layer costs.

Account for the efficient layer of this chapter, `mh.MultiHeadAttention(d_in, d_out,
context_length, dropout, num_heads, qkv_bias)`, on a batch of `batch` sequences of `num_tokens`
tokens, without running it. Write `attention_layer_cost(batch, num_tokens, d_in, d_out, num_heads,
qkv_bias)` (Python `int`s and a `bool`; `d_out` divisible by `num_heads`) that returns a `dict` with
exactly these keys, each value a Python `int` (a NumPy integer counts as one; a float, even a
whole one, or a tensor does not):

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
from ._common import _PUBLIC_SEED

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


def _case(seed, public, draw):
    """The calls of ``public`` (argument tuples) at the public seed; at any other seed ``draw(g)``
    from the seed's generator, drawn again while it gives the public sizes."""
    if seed == _PUBLIC_SEED:
        return [Call(args=args) for args in public]
    g = gen(seed)
    while True:
        drawn = draw(g)
        if drawn != public:
            return [Call(args=args) for args in drawn]


def _other_than(g, low, high, avoid):
    """An integer in [low, high] other than ``avoid``."""
    value = randint(g, low, high - 1)
    return value + (value >= avoid) if low <= avoid <= high else randint(g, low, high)


def _gpt2_calls(seed):
    """The page's benchmark layer: d_model 768, 12 heads, 1024 tokens (weights of 48 MB in float32).
    At grading: another large layer with biases, d_in = d_out = heads * head_dim, 512 to 1024 tokens
    and a batch of 1 or 2, whose attention weights are no larger than the page's (an answer that
    runs the layer costs no more)."""
    def draw(g):
        while True:
            heads, head_dim = (8, 12, 16)[randint(g, 0, 2)], (48, 64, 80)[randint(g, 0, 2)]
            batch, tokens = randint(g, 1, 2), randint(g, 512, 1024)
            if batch * heads * tokens ** 2 <= 12 * 1024 ** 2:
                return [(batch, tokens, heads * head_dim, heads * head_dim, heads, True)]
    return _case(seed, [(1, 1024, 768, 768, 12, True)], draw)


def _small_calls(seed):
    """Two small layers: d_in = d_out without biases, then d_in != d_out with qkv_bias."""
    def draw(g):
        heads = randint(g, 2, 4)
        d_model = heads * randint(g, 1, 4)
        first = (randint(g, 1, 3), randint(g, 2, 8), d_model, d_model, heads, False)
        heads = randint(g, 1, 3)
        d_out = heads * randint(g, 1, 4)
        return [first, (randint(g, 1, 3), randint(g, 2, 8), _other_than(g, 1, 8, d_out), d_out, heads, True)]
    return _case(seed, [(2, 6, 8, 8, 4, False), (1, 3, 4, 6, 2, True)], draw)


def _shapes_calls(seed):
    """One layer (d_in != d_out) with 1 head and with several; then a single token, one feature per
    head, with biases."""
    def draw(g):
        heads = randint(g, 2, 6)
        d_out = heads * randint(g, 1, 3)
        d_in, batch, tokens = _other_than(g, 1, 12, d_out), randint(g, 1, 4), randint(g, 2, 9)
        single = randint(g, 2, 6)
        return [(batch, tokens, d_in, d_out, 1, False), (batch, tokens, d_in, d_out, heads, False),
                (1, 1, _other_than(g, 1, 6, single), single, single, True)]
    return _case(seed, [(3, 5, 10, 12, 1, False), (3, 5, 10, 12, 6, False), (1, 1, 2, 4, 4, True)], draw)


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(3):
        heads = randint(g, 1, 8)
        calls.append(Call(args=(randint(g, 1, 8), randint(g, 1, 300), randint(g, 1, 64),
                                heads * randint(g, 1, 16), heads, bool(randint(g, 0, 1)))))
    return calls


_COUNT_VALUES = Check("count values", lambda seed: [], hint="", rtol=0.0, atol=0.0)  # for compare_outcome only


def _compare_count_types(got, want, calls):
    """The counts' values first (as the other checks compare them: a float or a 0-d tensor of the
    right value passes there), then their types: each must be of the type the reference gives, a
    Python int (a NumPy integer arrives as one), so a float or a tensor fails here, and only here."""
    from ...checks.checking import compare_outcome
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        where = "" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: "
        reason = compare_outcome(g, w, _COUNT_VALUES, c)
        if reason:
            return where + reason
        if w.get("status") != "ok":
            continue
        mine, theirs = g["value"]["__dict__"], w["value"]["__dict__"]
        for key, value in theirs.items():
            if type(mine[key]) is not type(value):
                if isinstance(mine[key], torch.Tensor):
                    found = f"a tensor of shape {tuple(mine[key].shape)}"
                else:
                    found = f"{type(mine[key]).__name__} {mine[key]!r}"[:60]
                wanted = "a Python int" if type(value) is int else f"a {type(value).__name__}"
                return f"{where}result[{key!r}] is {found}; the contract asks for {wanted}"
    return None


_TYPE_HINT = ("this check reads two small layers, as the second check does, and asks for their values first (the "
              "reason above says which one differs, if any); once they are right, each of the three counts must "
              "be a Python int, as the contract says: a float (even a whole one, such as 96.0) or a tensor is "
              "refused.")


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


@mistakes.keep("a count computed as a float",
               "your counts have the right values, but multiply_adds is a float: a true division (/) gives a "
               "float even where it divides evenly, and everything multiplied by it is a float too. The "
               "contract asks for Python ints (// divides ints into an int).")
def _cost_float_head_dim(batch, num_tokens, d_in, d_out, num_heads, qkv_bias):
    head_dim = d_out / num_heads
    parameters = 3 * d_in * d_out + (3 * d_out if qkv_bias else 0) + d_out * d_out + d_out
    per_head = 2 * batch * num_tokens * num_tokens * head_dim
    return {"parameters": parameters, "weights_elements": batch * num_heads * num_tokens * num_tokens,
            "multiply_adds": 3 * batch * num_tokens * d_in * d_out + num_heads * per_head
            + batch * num_tokens * d_out * d_out}


@mistakes.keep("counts left as tensors",
               "your counts have the right values, but they are 0-d tensors (torch arithmetic on the sizes "
               "returns tensors); the contract asks for Python ints: convert each count with int(...).")
def _cost_tensors(batch, num_tokens, d_in, d_out, num_heads, qkv_bias):
    counts = attention_layer_cost(batch, num_tokens, d_in, d_out, num_heads, qkv_bias)
    return {key: torch.tensor(value) for key, value in counts.items()}

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
    label="ch06_ex5", title="What a multi-head layer costs",
    name="attention_layer_cost", reference=attention_layer_cost, points=2,
    checks=[
        Check("the page's benchmark layer: d_model 768, 12 heads, 1024 tokens, with biases (48 MB of weights)",
              _gpt2_calls, hint=_HINT, rtol=0.0, atol=0.0),
        Check("two small layers, with and without biases", _small_calls, hint=_HINT, rtol=0.0, atol=0.0),
        Check("d_in differs from d_out; 1 head, 6 heads, and a single token", _shapes_calls, hint=_HINT,
              rtol=0.0, atol=0.0),
        Check("every count is a Python int, not a float or a tensor (two small layers)", _small_calls,
              hint=_TYPE_HINT, compare=_compare_count_types, weight=0.25),
        Check("random sizes (hidden)", _hidden_calls, public=False, hint=_HINT, rtol=0.0, atol=0.0),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
