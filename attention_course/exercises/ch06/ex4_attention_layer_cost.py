r"""ch06_ex4: What a cross-attention layer with free head widths costs.

This chapter's layer cuts `d_out` into `num_heads` heads and attends from a sequence to itself. Here
both choices are undone. The layer attends from queries `x` of shape `(batch, num_queries, d_in)`
to a memory of shape `(batch, num_keys, d_memory)` (another sequence, of another width), and each
of its `num_heads` heads has `head_dim` features of its own, whatever `d_in` is. It is the
chapter's efficient layer with these changes: `W_query = nn.Linear(d_in, num_heads * head_dim,
bias=qkv_bias)` reads `x`; `W_key` and `W_value`, each `nn.Linear(d_memory, num_heads * head_dim,
bias=qkv_bias)`, read the memory; there is no mask and no dropout; and `out_proj =
nn.Linear(num_heads * head_dim, d_in)` (with a bias) brings the merged heads back to the width of
`x`. Without building or running it, write `attention_layer_cost(batch, num_queries, num_keys,
d_in, d_memory, num_heads, head_dim, qkv_bias)` (Python `int`s, all at least 1, and a `bool`) that
returns a `dict` with exactly these keys, each value a Python `int` (a NumPy integer counts as
one; a float, even a whole one, or a tensor does not):

- `"parameters"`: the number of parameters of the layer (weights and biases);
- `"weights_elements"`: the number of entries of the attention weights of one forward pass;
- `"multiply_adds"`: the multiply-adds of one forward pass in its matrix products: the three
  projections, the scores of every head, the weighted sums of the values of every head, and the
  output projection. (A product of an `(m, k)` matrix by a `(k, n)` one takes `m * k * n`
  multiply-adds; leave out the softmax, the scaling and the biases.)
"""
from __future__ import annotations

import torch
from torch import nn

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import _PUBLIC_SEED

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def attention_layer_cost(batch, num_queries, num_keys, d_in, d_memory, num_heads, head_dim, qkv_bias):
    """Parameters, entries of the weights and multiply-adds of the cross-attention layer, from its sizes."""
    inner = num_heads * head_dim
    bias = inner if qkv_bias else 0
    parameters = (d_in * inner + bias) + 2 * (d_memory * inner + bias) + inner * d_in + d_in
    weights_elements = batch * num_heads * num_queries * num_keys
    queries = batch * num_queries * d_in * inner
    keys_values = 2 * batch * num_keys * d_memory * inner
    scores = batch * num_heads * num_queries * head_dim * num_keys
    pooling = batch * num_heads * num_queries * num_keys * head_dim
    output = batch * num_queries * inner * d_in
    return {"parameters": parameters, "weights_elements": weights_elements,
            "multiply_adds": queries + keys_values + scores + pooling + output}


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


def _cross_sizes(g, bias):
    """One cross-attention layer whose sizes tell every kept mistake apart: num_keys != num_queries,
    d_memory != d_in, and num_heads * head_dim != d_in (and not d_in // num_heads per head)."""
    heads = randint(g, 2, 4)
    head_dim = randint(g, 2, 6)
    d_in = _other_than(g, 2, 16, heads * head_dim)
    while d_in // heads == head_dim:
        d_in = _other_than(g, 2, 16, heads * head_dim)
    queries = randint(g, 2, 8)
    return (randint(g, 1, 3), queries, _other_than(g, 1, 12, queries), d_in, _other_than(g, 2, 16, d_in),
            heads, head_dim, bias)


def _cross_calls(seed):
    """A decoder's cross-attention with biases, then one without, over a memory shorter than the queries."""
    return _case(seed, [(2, 6, 10, 12, 8, 3, 5, True), (1, 4, 3, 6, 10, 2, 4, False)],
                 lambda g: [_cross_sizes(g, True), _cross_sizes(g, False)])


def _self_calls(seed):
    """The chapter's own case: the memory is x itself, head_dim = d_in // num_heads, no biases."""
    def draw(g):
        heads, tokens = randint(g, 1, 4), randint(g, 1, 9)
        d_model = heads * randint(g, 1, 4)
        return [(randint(g, 1, 3), tokens, tokens, d_model, d_model, heads, d_model // heads, False)]
    return _case(seed, [(2, 5, 5, 8, 8, 4, 2, False)], draw)


def _edge_calls(seed):
    """One query and one head wider than d_in, with biases; then a memory of a single token."""
    def draw(g):
        d_in = randint(g, 2, 6)
        queries = randint(g, 2, 6)
        return [(randint(g, 1, 4), 1, randint(g, 2, 12), d_in, _other_than(g, 1, 9, d_in), 1,
                 d_in + randint(g, 1, 6), True),
                (randint(g, 1, 2), queries, 1, d_in, _other_than(g, 1, 9, d_in), randint(g, 2, 3), 1, False)]
    return _case(seed, [(3, 1, 9, 4, 6, 1, 7, True), (1, 5, 1, 3, 2, 2, 1, False)], draw)


def _hidden_calls(seed):
    g = gen(seed)
    return [Call(args=_cross_sizes(g, bool(randint(g, 0, 1)))) for _ in range(3)]


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


_TYPE_HINT = ("this check reads the first check's two layers and asks for their values first (the reason above "
              "says which one differs, if any); once they are right, each of the three counts must be a Python "
              "int, as the contract says: a float (even a whole one, such as 96.0) or a tensor is refused.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _cost_variant(key_fan_in="d_memory", inner_from="head_dim", square=False, head_width="head_dim",
                  out_bias=True, out_to="d_in", kv_tokens="num_keys", qkv_bias_counted=True):
    """The count with one slip switched on."""
    def cost(batch, num_queries, num_keys, d_in, d_memory, num_heads, head_dim, qkv_bias):
        if inner_from == "d_in":
            head_dim = d_in // num_heads
        inner = num_heads * head_dim
        fan_in = d_memory if key_fan_in == "d_memory" else d_in
        keys = num_queries if square else num_keys
        kv_rows = batch * (num_keys if kv_tokens == "num_keys" else num_queries)
        out_width = d_in if out_to == "d_in" else inner
        bias = inner if qkv_bias and qkv_bias_counted else 0
        parameters = d_in * inner + 2 * fan_in * inner + 3 * bias + inner * out_width + (out_width if out_bias else 0)
        width = head_dim if head_width == "head_dim" else inner
        multiply_adds = (batch * num_queries * d_in * inner + 2 * kv_rows * fan_in * inner
                         + 2 * batch * num_heads * num_queries * keys * width + batch * num_queries * inner * out_width)
        return {"parameters": parameters, "weights_elements": batch * num_heads * num_queries * keys,
                "multiply_adds": multiply_adds}
    return cost


mistakes.add("keys and values read from d_in",
             "W_key and W_value were counted as reading d_in features; they read the memory, whose tokens have "
             "d_memory features.",
             _cost_variant(key_fan_in="d_in"))
mistakes.add("heads cut from d_in",
             "the heads were counted as splitting d_in, as in the chapter's layer; here each head has head_dim "
             "features of its own, whatever d_in is.",
             _cost_variant(inner_from="d_in"))
mistakes.add("square attention weights",
             "the attention weights and the products of the scores and sums were counted as if the queries "
             "attended to themselves; each query meets the num_keys tokens of the memory.",
             _cost_variant(square=True))
mistakes.add("keys and values projected over the queries",
             "W_key and W_value were counted over num_queries tokens; they run over the memory's num_keys "
             "tokens.",
             _cost_variant(kv_tokens="num_queries"))
mistakes.add("heads multiplied twice",
             "each head's scores and weighted sums were counted at the width of all heads together and then "
             "multiplied by num_heads again; a head works on its own head_dim features.",
             _cost_variant(head_width="inner"))
mistakes.add("out_proj kept at the heads' width",
             "out_proj was counted as square, from the merged heads to a tensor as wide as they are; it brings "
             "them back to d_in features.",
             _cost_variant(out_to="inner"))
mistakes.add("output bias left out",
             "out_proj has a bias (d_in parameters) whether or not qkv_bias is set.",
             _cost_variant(out_bias=False))
mistakes.add("query, key and value biases left out",
             "with qkv_bias the three projections have a bias each, as wide as their outputs.",
             _cost_variant(qkv_bias_counted=False))


@mistakes.keep("a count computed as a float",
               "your counts have the right values, but multiply_adds is a float: a true division (/) gives a "
               "float even where it divides evenly, and everything multiplied by it is a float too. The "
               "contract asks for Python ints (// divides ints into an int).")
def _cost_float(batch, num_queries, num_keys, d_in, d_memory, num_heads, head_dim, qkv_bias):
    counts = attention_layer_cost(batch, num_queries, num_keys, d_in, d_memory, num_heads, head_dim, qkv_bias)
    per_head = counts["multiply_adds"] / num_heads
    return dict(counts, multiply_adds=per_head * num_heads)


@mistakes.keep("counts left as tensors",
               "your counts have the right values, but they are 0-d tensors (torch arithmetic on the sizes "
               "returns tensors); the contract asks for Python ints: convert each count with int(...).")
def _cost_tensors(batch, num_queries, num_keys, d_in, d_memory, num_heads, head_dim, qkv_bias):
    counts = attention_layer_cost(batch, num_queries, num_keys, d_in, d_memory, num_heads, head_dim, qkv_bias)
    return {key: torch.tensor(value) for key, value in counts.items()}


# Kept alternatives (correct answers in other styles) --------------------------------------


class _Cross(nn.Module):
    """The layer of the contract, for the alternatives that build it (on the meta device)."""

    def __init__(self, d_in, d_memory, num_heads, head_dim, qkv_bias):
        super().__init__()
        self.num_heads, inner = num_heads, num_heads * head_dim
        self.W_query = nn.Linear(d_in, inner, bias=qkv_bias)
        self.W_key = nn.Linear(d_memory, inner, bias=qkv_bias)
        self.W_value = nn.Linear(d_memory, inner, bias=qkv_bias)
        self.out_proj = nn.Linear(inner, d_in)

    def forward(self, x, memory):
        def split(t):
            return t.view(t.shape[0], t.shape[1], self.num_heads, -1).transpose(1, 2)
        q, k, v = split(self.W_query(x)), split(self.W_key(memory)), split(self.W_value(memory))
        weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)), weights


@alternatives.keep("the layer built and run on the meta device",
                   "the layer built on the meta device (no memory), parameters counted with numel, the weights' "
                   "entries read from the forward pass, multiply-adds from torch's FLOP counter halved")
def _cost_alt_meta(batch, num_queries, num_keys, d_in, d_memory, num_heads, head_dim, qkv_bias):
    from torch.utils.flop_counter import FlopCounterMode
    with torch.device("meta"):
        layer = _Cross(d_in, d_memory, num_heads, head_dim, qkv_bias)
        x, memory = torch.empty(batch, num_queries, d_in), torch.empty(batch, num_keys, d_memory)
        with FlopCounterMode(display=False) as counter:
            _, weights = layer(x, memory)
    return {"parameters": sum(p.numel() for p in layer.parameters()), "weights_elements": weights.numel(),
            "multiply_adds": counter.get_total_flops() // 2}


@alternatives.keep("a loop over heads", "per-head costs summed in a loop, parameters listed layer by layer")
def _cost_alt_loop(batch, num_queries, num_keys, d_in, d_memory, num_heads, head_dim, qkv_bias):
    inner = num_heads * head_dim
    layers = [(d_in, inner, qkv_bias, num_queries), (d_memory, inner, qkv_bias, num_keys),
              (d_memory, inner, qkv_bias, num_keys), (inner, d_in, True, num_queries)]
    parameters = sum(fan_in * fan_out + (fan_out if bias else 0) for fan_in, fan_out, bias, _ in layers)
    macs = sum(batch * rows * fan_in * fan_out for fan_in, fan_out, _, rows in layers)
    weights = 0
    for _ in range(num_heads):
        weights += batch * num_queries * num_keys
        macs += 2 * batch * num_queries * num_keys * head_dim
    return dict(parameters=parameters, weights_elements=weights, multiply_adds=macs)


@alternatives.keep("FLOPs halved, in float then int",
                   "FLOPs counted as 2 per multiply-add in floating point, per token of each sequence, halved "
                   "and converted back to int")
def _cost_alt_flops(batch, num_queries, num_keys, d_in, d_memory, num_heads, head_dim, qkv_bias):
    inner = float(num_heads * head_dim)
    per_query = 2.0 * (d_in * inner + 2 * num_keys * inner + inner * d_in)
    per_key = 2.0 * 2 * d_memory * inner
    flops = batch * (num_queries * per_query + num_keys * per_key)
    parameters = inner * (d_in + 2 * d_memory + d_in + (3 if qkv_bias else 0)) + d_in
    return {"multiply_adds": int(round(flops / 2)), "parameters": int(round(parameters)),
            "weights_elements": int(batch * num_heads * num_queries * num_keys)}


# Registration -----------------------------------------------------------------------------

_HINT = ("this check compares the three counts exactly (Python ints); the reason above names the first key that "
         "differs: list the layer's matrices and matrix products with their shapes (which sequence each one "
         "reads, and how wide each one is) and add them up.")

register(Exercise(
    label="ch06_ex4", title="What a cross-attention layer with free head widths costs",
    name="attention_layer_cost", reference=attention_layer_cost, points=2,
    checks=[
        Check("cross-attention: 6 queries (d_in 12) over 10 memory tokens (d_memory 8), 3 heads of 5, biases; "
              "then 4 queries over 3 tokens, no biases", _cross_calls, hint=_HINT, rtol=0.0, atol=0.0),
        Check("the chapter's own case: the memory is x, 4 heads of 2 cut from d_in 8, no biases", _self_calls,
              hint=_HINT, rtol=0.0, atol=0.0),
        Check("one query, one head of 7 wider than d_in 4; a memory of a single token", _edge_calls, hint=_HINT,
              rtol=0.0, atol=0.0),
        Check("every count is a Python int, not a float or a tensor (the first check's layers)", _cross_calls,
              hint=_TYPE_HINT, compare=_compare_count_types, weight=0.25),
        Check("random sizes (hidden)", _hidden_calls, public=False, hint=_HINT, rtol=0.0, atol=0.0),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
