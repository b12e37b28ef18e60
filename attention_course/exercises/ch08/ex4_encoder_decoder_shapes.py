"""ch08_ex4: Shapes through an encoder-decoder forward pass.

Write `encoder_decoder_shapes(batch, src_len, tgt_len, d_model, num_heads, d_ff, num_layers,
src_vocab, tgt_vocab)` (all Python `int`s, `d_model` even) that describes a forward pass of
`tf.Transformer(src_vocab, tgt_vocab, d_model, num_heads, num_layers, d_ff)` (pre-LN, this
chapter's model) on a batch of `batch` sources of `src_len` tokens and decoder inputs of `tgt_len`
tokens, **without running it**. Return a `dict` with exactly these keys; every value except the
last is a tuple of Python `int`s (a `torch.Size` is one; a list is not):

- `"src_embedded"`: the source after embedding and positional encoding;
- `"memory"`: the encoder's output;
- `"encoder_self_weights"`, `"decoder_self_weights"`, `"cross_weights"`: the attention weights
  of one encoder self-attention, one decoder self-attention and one cross-attention layer, in the
  layout `(batch, heads, queries, keys)`;
- `"queries_per_head"`: the queries of one cross-attention layer split into heads, in the layout
  `(batch, heads, queries, head_dim)` in which each head's scores are computed (after the
  transpose that brings the heads before the queries, as in the weights);
- `"ffn_hidden"`: the hidden layer (after `linear1`) of one decoder block's feed-forward network;
- `"logits"`: the model's output;
- `"num_parameters"`: a Python `int` (a NumPy integer counts as one; a float or a tensor does
  not), the number of parameters of the model: two embedding tables (the
  positional table is a buffer, not a parameter), `num_layers` encoder blocks (one attention layer,
  one feed-forward network, two layer norms each), `num_layers` decoder blocks (two attention
  layers, one feed-forward network, three layer norms each), the final layer norm of each stack
  and the output layer `nn.Linear(d_model, tgt_vocab)`. Attention layers and feed-forward networks
  are those of the exercises above.

Raise `ValueError` naming `d_model` and `num_heads` and giving their values when `d_model` is not
divisible by `num_heads`.
"""
from __future__ import annotations

from torch import nn
import torch

from ... import transformer as tf
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import _public_or_drawn

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


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


# Inputs of the public and hidden checks ---------------------------------------------------


def _shapes_main_calls(seed):
    """A target shorter than its source, several heads and layers, two vocabularies (the sizes printed
    in the check's name at the public seed; others of the same kind at any other)."""
    def draw(g):
        src_len = randint(g, 3, 9)
        tgt_len = randint(g, 2, src_len - 1)
        heads = randint(g, 2, 4)
        if heads == tgt_len:            # heads before or after the queries: two different shapes
            heads = 2 + (heads - 1) % 3
        src_vocab, tgt_vocab = randint(g, 8, 40), randint(g, 8, 39)
        tgt_vocab += tgt_vocab >= src_vocab
        return [Call(args=(randint(g, 1, 4), src_len, tgt_len, 2 * heads * randint(g, 1, 3), heads,
                           randint(g, 3, 24), randint(g, 2, 3), src_vocab, tgt_vocab))]
    return _public_or_drawn(seed, lambda: [Call(args=(2, 7, 5, 8, 2, 16, 2, 20, 12))], draw)


def _shapes_other_calls(seed):
    """A target longer than its source with 4 heads and 1 layer; a one-token source and target with one
    head and 3 layers, one vocabulary size for both."""
    def draw(g):
        src_len = randint(g, 2, 6)
        vocab = randint(g, 5, 30)
        return [Call(args=(randint(g, 1, 4), src_len, src_len + randint(g, 1, 5), 4 * 2 * randint(g, 1, 2), 4,
                           randint(g, 3, 30), 1, randint(g, 10, 40), randint(g, 5, 30))),
                Call(args=(randint(g, 1, 3), 1, 1, 2 * randint(g, 1, 5), 1, randint(g, 3, 12), 3, vocab, vocab))]
    return _public_or_drawn(seed, lambda: [Call(args=(3, 4, 9, 12, 4, 24, 1, 30, 15)),
                                           Call(args=(1, 1, 1, 6, 1, 5, 3, 7, 7))], draw)


def _shapes_bad_calls(seed):
    """A d_model (even) that num_heads does not divide: 10 with 4 heads at the public seed."""
    def draw(g):
        heads, d_model = randint(g, 3, 6), 0
        while d_model % heads == 0:
            d_model = 2 * randint(g, 2, 12)
        return [Call(args=(randint(g, 1, 4), randint(g, 2, 9), randint(g, 2, 9), d_model, heads, randint(g, 3, 24),
                           randint(g, 1, 3), randint(g, 5, 40), randint(g, 5, 40)))]
    return _public_or_drawn(seed, lambda: [Call(args=(2, 7, 5, 10, 4, 16, 2, 20, 12))], draw)


def _mention_sizes(call):
    """The error message names d_model and num_heads and gives their values."""
    return ["d_model", "num_heads", str(call.args[3]), str(call.args[4])]


def _shapes_hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(2):
        heads = randint(g, 1, 4)
        calls.append(Call(args=(randint(g, 1, 4), randint(g, 2, 9), randint(g, 2, 9),
                                2 * heads * randint(g, 1, 2), heads, randint(g, 3, 20), randint(g, 1, 3),
                                randint(g, 5, 40), randint(g, 5, 40))))
    return calls


def _as_tuple_values(value):
    """Shapes given as lists compare like tuples in the value checks: the container's type is the
    business of the type check, so that a list is treated like a float or a tensor (one plain reason)."""
    if isinstance(value, dict) and "__list__" in value:
        return {"__seq__": value["__list__"]}
    return value


_SHAPE_VALUES = Check("shape values", lambda seed: [], hint="")     # rtol/atol for compare_outcome only


def _compare_shape_values(got, want, calls):
    """The values of the dict (shapes and count), whatever the type of the containers and numbers."""
    from ...checks.checking import compare_outcome
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        if g.get("status") == "ok" and isinstance(g.get("value"), dict) and "__dict__" in g["value"]:
            g = dict(g, value={"__dict__": {k: _as_tuple_values(v) for k, v in g["value"]["__dict__"].items()}})
        reason = compare_outcome(g, w, _SHAPE_VALUES, c)
        if reason:
            return reason if len(calls) == 1 else f"call {i + 1} of {len(calls)}: {reason}"
    return None


_SHAPE_KEYS = ("src_embedded", "memory", "encoder_self_weights", "decoder_self_weights", "cross_weights",
               "queries_per_head", "ffn_hidden", "logits", "num_parameters")


def _describe_plain(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, dict) and "__list__" in value:
        return "a list"
    if isinstance(value, dict) and "__unsupported__" in value:
        return f"a {value['__unsupported__']}"
    return f"{type(value).__name__} {value!r}"[:60]


def _compare_shape_types(got, want, calls):
    """num_parameters an int, every shape a tuple (or torch.Size) of ints, on a result whose keys
    and values are right: an empty dict or constants must not pass a check of the types."""
    from ...checks.checking import compare_outcome
    wrong_values = _compare_shape_values(got, want, calls)
    if wrong_values:
        return wrong_values
    for g, w, c in zip(got, want, calls):
        if g.get("status") != "ok" or not (isinstance(g.get("value"), dict) and "__dict__" in g["value"]):
            reason = compare_outcome(g, w, _SHAPE_VALUES, c)
            if reason:
                return reason
            continue
        values = g["value"]["__dict__"]
        for key in _SHAPE_KEYS:
            if key not in values:
                return f"result has no key {key!r}"
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


_SHAPES_HINT = ("every shape and num_parameters are compared with those of tf.Transformer's forward pass: "
                "queries come from the target, keys from the source; the weights are in the layout (batch, "
                "heads, queries, keys) and queries_per_head in (batch, heads, queries, head_dim), with "
                "head_dim = d_model // num_heads; the count includes every weight and bias, the layer norms "
                "(two per encoder block, three per decoder block, one after each stack) included.")


_SHAPES_TYPE_HINT = ("this check reads a call of the first check's kind (in the notebook, that very call) and asks "
                     "for its values first (the reason above says which one differs, if any); once they are "
                     "right, num_parameters must be a Python int (not a float or a tensor), and every shape a "
                     "tuple of Python ints (a torch.Size is one; a list, floats or tensors are not).")


# Kept mistakes, each with its hint --------------------------------------------------------


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


mistakes.add("cross-attention over the target",
             "the cross-attention's queries come from the target and its keys from the source: its "
             "weights are (batch, num_heads, tgt_len, src_len).",
             _shapes_variant(cross_weights=lambda s, v: (s["batch"], s["num_heads"], s["tgt_len"],
                                                         s["tgt_len"])))


mistakes.add("cross weights transposed",
             "rows are queries (target positions), columns keys (source positions): (batch, num_heads, "
             "tgt_len, src_len).",
             _shapes_variant(cross_weights=lambda s, v: (s["batch"], s["num_heads"], s["src_len"],
                                                         s["tgt_len"])))


mistakes.add("heads d_model wide",
             "each head works on d_model // num_heads features, not d_model.",
             _shapes_variant(queries_per_head=lambda s, v: v[:3] + (s["d_model"],)))


mistakes.add("queries_per_head before the transpose",
             "your queries_per_head is (batch, tgt_len, num_heads, head_dim), the layout right after the "
             "view that splits d_model; the contract asks for the layout in which each head's scores are "
             "computed, (batch, num_heads, tgt_len, head_dim), heads before queries as in the weights.",
             _shapes_variant(queries_per_head=lambda s, v: (v[0], v[2], v[1], v[3])))


def _no_bias_count(s, _):
    d, f, v = s["d_model"], s["d_ff"], s["tgt_vocab"]
    return ((s["src_vocab"] + v) * d + s["num_layers"] * (3 * 4 * d * d + 2 * 2 * d * f + 5 * 2 * d)
            + 4 * d + d * v)


mistakes.add("biases and norms not counted",
             "the parameter count must include every bias (out_proj, both FFN layers, the output layer) "
             "and the layer norms' weights and biases.",
             _shapes_variant(num_parameters=_no_bias_count))


mistakes.add("one cross-attention too few",
             "a decoder block has two attention layers (self and cross) and three layer norms; an "
             "encoder block has one attention layer and two norms.",
             _shapes_variant(num_parameters=lambda s, v: v - s["num_layers"] * (4 * s["d_model"] ** 2
                                                                                + s["d_model"])))



# Parameter counts that leave out (or add) one kind of parameter; each hint names the kind, not the
# count (the count is the exercise). s: the sizes by name, v: the right count.
def _attention_layers(s):
    """The number of attention layers in the model: one per encoder block, two per decoder block."""
    return 3 * s["num_layers"]


def _layer_norms(s):
    """The number of layer norms: two per encoder block, three per decoder block, one after each stack."""
    return 5 * s["num_layers"] + 2


mistakes.add("attention output projection not counted",
             "your count leaves out each attention layer's output projection out_proj (its weight and its "
             "bias): an attention layer has it besides W_query, W_key and W_value.",
             _shapes_variant(num_parameters=lambda s, v: v - _attention_layers(s) * (s["d_model"] ** 2
                                                                                     + s["d_model"])))


mistakes.add("biases counted on W_query, W_key and W_value",
             "this chapter's attention layers have no bias on W_query, W_key and W_value (built with "
             "bias=False); of the four projections only out_proj has one.",
             _shapes_variant(num_parameters=lambda s, v: v + _attention_layers(s) * 3 * s["d_model"]))


mistakes.add("layer norms without their bias",
             "your count gives each layer norm one vector of d_model parameters; nn.LayerNorm learns two, a "
             "weight (the scale) and a bias (the shift).",
             _shapes_variant(num_parameters=lambda s, v: v - _layer_norms(s) * s["d_model"]))


mistakes.add("final layer norms not counted",
             "your count leaves out the layer norm that ends each stack (pre-LN: one after the encoder's last "
             "block, one after the decoder's), besides the norms inside the blocks.",
             _shapes_variant(num_parameters=lambda s, v: v - 4 * s["d_model"]))


mistakes.add("output layer's bias not counted",
             "the output layer nn.Linear(d_model, tgt_vocab) has a bias too, one entry per target token.",
             _shapes_variant(num_parameters=lambda s, v: v - s["tgt_vocab"]))


mistakes.add("one embedding table for both languages",
             "your count has one embedding table; tf.Transformer has two, one for the source vocabulary "
             "(src_vocab tokens) and one for the target's (tgt_vocab tokens), not shared.",
             _shapes_variant(num_parameters=lambda s, v: v - s["d_model"] * s["src_vocab"]))

# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("measured on the package's model",
                   "builds tf.Transformer, records shapes with forward "
"hooks, counts parameters; torch.Size values")
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


@alternatives.keep("counted from nn modules",
                   "counts the parameters of one nn.Linear/LayerNorm of each "
"kind; shapes built as lists then tuples")
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


@alternatives.keep("d2l's transpose_qkv",
                   "d2l's conventions: num_hiddens, ffn_num_hiddens, num_blks, heads "
"folded into the batch by transpose_qkv and unfolded; AddNorm counted per sublayer")
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


@alternatives.keep("meta tensors",
                   "empty tensors on the meta device pushed through the products; a "
   "regrouped count")
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


# Registration -----------------------------------------------------------------------------

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
              must_mention=_mention_sizes,
              hint="check d_model % num_heads first; name d_model and num_heads with their values.", weight=0.5),
        Check("random sizes (hidden)", _shapes_hidden_calls, public=False, hint=_SHAPES_HINT,
              compare=_compare_shape_values),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
