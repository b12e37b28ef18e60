r"""ch08_ex4: Where a Transformer's parameters go, with tied embeddings.

The original Transformer shares one weight matrix between its embedding tables and its output
layer. Account for this chapter's model, `tf.Transformer(src_vocab, tgt_vocab, d_model,
num_heads, num_layers, d_ff)` (pre-LN, as built on this page), with such tying, **without
building it**. Write `transformer_parameters(d_model, num_heads, d_ff, num_layers, src_vocab,
tgt_vocab, tie)` (Python `int`s, all at least 1, and a string) where `tie` says which weights are
one tensor:

- `"none"`: the model as the page builds it;
- `"output"`: the output layer's weight is the target embedding table itself
  (`model.out.weight = model.tgt_embedding.weight`, possible because both are
  `(tgt_vocab, d_model)`);
- `"all"`: besides, the source embedding is that same table
  (`model.src_embedding.weight = model.tgt_embedding.weight`), one vocabulary for both sides.

Return a `dict` with exactly these keys, each value a Python `int` (a NumPy integer counts as
one; a float or a tensor does not), each counting every distinct parameter entry once:

- `"embeddings"`: the entries of the embedding tables;
- `"attention"`: those of every attention layer of both stacks;
- `"feed_forward"`: those of every feed-forward network;
- `"norms"`: those of every layer norm;
- `"output"`: those of the output layer not already counted in `"embeddings"`;
- `"total"`: the number of parameters of the model, the sum of the five above, as
  `sum(p.numel() for p in model.parameters())` gives it on the tied model.

Raise `ValueError` naming `d_model` and `num_heads` and giving their values when `d_model` is not
divisible by `num_heads`, and naming `src_vocab` and `tgt_vocab` and giving their values when
`tie` is `"all"` and they differ.
"""
from __future__ import annotations

import torch
from torch import nn

from ... import transformer as tf
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, randint
from ._common import _public_or_drawn

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate(d_model, num_heads, src_vocab, tgt_vocab, tie):
    if d_model % num_heads:
        raise ValueError(f"d_model must be divisible by num_heads, got d_model={d_model} and "
                         f"num_heads={num_heads}")
    if tie == "all" and src_vocab != tgt_vocab:
        raise ValueError(f"tie='all' needs one vocabulary, got src_vocab={src_vocab} and tgt_vocab={tgt_vocab}")


def transformer_parameters(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie):
    """The parameters of tf.Transformer by kind, with the output (and source) weights tied as asked."""
    _validate(d_model, num_heads, src_vocab, tgt_vocab, tie)
    attention_layer = 4 * d_model * d_model + d_model        # W_query, W_key, W_value (no bias), out_proj
    ffn = 2 * d_model * d_ff + d_ff + d_model
    counts = {
        "embeddings": (tgt_vocab if tie == "all" else src_vocab + tgt_vocab) * d_model,
        "attention": 3 * num_layers * attention_layer,        # one per encoder block, two per decoder block
        "feed_forward": 2 * num_layers * ffn,
        "norms": (5 * num_layers + 2) * 2 * d_model,          # 2 + 3 per block pair, one after each stack
        "output": tgt_vocab if tie in ("output", "all") else d_model * tgt_vocab + tgt_vocab,
    }
    counts["total"] = sum(counts.values())
    return counts


# Inputs of the public and hidden checks ---------------------------------------------------


def _sizes(g, tie):
    """A model drawn from g: num_heads divides d_model, the vocabularies differ unless tie is "all"."""
    heads = randint(g, 1, 4)
    src_vocab, tgt_vocab = randint(g, 5, 40), randint(g, 5, 39)
    tgt_vocab += tgt_vocab >= src_vocab
    if tie == "all":
        src_vocab = tgt_vocab
    return (2 * heads * randint(g, 1, 3), heads, randint(g, 3, 24), randint(g, 1, 3), src_vocab, tgt_vocab, tie)


def _tie_calls(seed):
    """One model untied, then with its output layer tied to the target table."""
    def draw(g):
        untied = _sizes(g, "none")
        return [Call(args=untied), Call(args=untied[:6] + ("output",))]
    return _public_or_drawn(seed, lambda: [Call(args=(8, 2, 16, 2, 20, 12, "none")),
                                           Call(args=(8, 2, 16, 2, 20, 12, "output"))], draw)


def _all_calls(seed):
    """Every table one tensor: one vocabulary for both sides."""
    def draw(g):
        return [Call(args=_sizes(g, "all")), Call(args=_sizes(g, "all"))]
    return _public_or_drawn(seed, lambda: [Call(args=(12, 4, 24, 1, 15, 15, "all")),
                                           Call(args=(6, 1, 5, 3, 7, 7, "all"))], draw)


def _heads_calls(seed):
    """One d_model cut into several head counts, 3 layers, the output tied."""
    def draw(g):
        d_ff, layers, src_vocab = randint(g, 3, 24), randint(g, 1, 3), randint(g, 5, 40)
        tgt_vocab = randint(g, 5, 40)
        return [Call(args=(12, heads, d_ff, layers, src_vocab, tgt_vocab, "output")) for heads in (1, 3, 4)]
    return _public_or_drawn(seed, lambda: [Call(args=(8, heads, 10, 3, 9, 30, "output")) for heads in (1, 2, 4)],
                            draw)


def _bad_calls(seed):
    """d_model=10 with 4 heads; then tie "all" with two vocabularies (20 and 12 at the public seed)."""
    def draw(g):
        heads, d_model = randint(g, 3, 6), 0
        while d_model % heads == 0:
            d_model = 2 * randint(g, 2, 12)
        good = _sizes(g, "none")
        return [Call(args=(d_model, heads) + _sizes(g, "none")[2:]), Call(args=good[:6] + ("all",))]
    return _public_or_drawn(seed, lambda: [Call(args=(10, 4, 16, 2, 20, 12, "none")),
                                           Call(args=(8, 2, 16, 2, 20, 12, "all"))], draw)


def _mention_sizes(call):
    """The message names the two sizes that clash and gives their values."""
    d_model, heads, _, _, src_vocab, tgt_vocab, _ = call.args
    if d_model % heads:
        return ["d_model", "num_heads", str(d_model), str(heads)]
    return ["src_vocab", "tgt_vocab", str(src_vocab), str(tgt_vocab)]


def _hidden_calls(seed):
    g = gen(seed)
    return [Call(args=_sizes(g, tie)) for tie in ("none", "output", "all")]


_COUNT_VALUES = Check("count values", lambda seed: [], hint="", rtol=0.0, atol=0.0)  # for compare_outcome only


def _compare_count_types(got, want, calls):
    """The counts' values first (as the other checks compare them), then their types: each a Python int
    (a NumPy integer arrives as one), so a float or a tensor fails here, and only here."""
    from ...checks.checking import compare_outcome
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        where = "" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: "
        reason = compare_outcome(g, w, _COUNT_VALUES, c)
        if reason:
            return where + reason
        if w.get("status") != "ok":
            continue
        mine = g["value"]["__dict__"]
        for key, value in w["value"]["__dict__"].items():   # the reference's type (a mistake's, when matching)
            if type(mine[key]) is not type(value):
                found = (f"a tensor of shape {tuple(mine[key].shape)}" if isinstance(mine[key], torch.Tensor)
                         else f"{type(mine[key]).__name__} {mine[key]!r}"[:60])
                wanted = "a Python int" if type(value) is int else f"a {type(value).__name__}"
                return f"{where}result[{key!r}] is {found}; the contract asks for {wanted}"
    return None


_HINT = ("this check compares the six counts exactly with those of tf.Transformer built with these sizes and "
         "its weights tied as tie says; the reason above names the first key that differs. Print a small "
         "tf.Transformer to see every module it holds.")

_TYPE_HINT = ("this check reads the first check's calls and asks for their values first (the reason above says "
              "which one differs, if any); once they are right, every count must be a Python int, as the "
              "contract says: a float (even a whole one) or a tensor is refused.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _count_variant(**changes):
    """The reference's counts with one key recomputed by ``changes[key](sizes, counts)``; total follows
    the groups unless it is the key changed."""
    def impl(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie):
        counts = transformer_parameters(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie)
        sizes = dict(d=d_model, h=num_heads, f=d_ff, n=num_layers, s=src_vocab, v=tgt_vocab, tie=tie)
        for key, fn in changes.items():
            counts[key] = fn(sizes, counts)
        if "total" not in changes:
            counts["total"] = sum(value for key, value in counts.items() if key != "total")
        return counts
    return impl


mistakes.add("tied output weight counted again",
             "with the output tied, the output layer's weight is the target embedding table: one tensor, "
             "already counted in embeddings. Only the output layer's own bias is new.",
             _count_variant(output=lambda s, c: s["d"] * s["v"] + s["v"]))
mistakes.add("output bias dropped with the tied weight",
             "tying shares the output layer's weight only; its bias stays a parameter of its own.",
             _count_variant(output=lambda s, c: c["output"] if s["tie"] == "none" else 0))
mistakes.add("source table counted apart under tie all",
             "with tie 'all' the source embedding is the target table itself: one table in embeddings.",
             _count_variant(embeddings=lambda s, c: (s["s"] + s["v"]) * s["d"]))
mistakes.add("total counts a shared table twice",
             "your groups are right but total is larger: a tensor shared by two modules is one parameter, and "
             "model.parameters() lists it once.",
             _count_variant(total=lambda s, c: sum(v for k, v in c.items() if k != "total")
                            + (s["d"] * s["v"] if s["tie"] != "none" else 0)
                            + (s["d"] * s["v"] if s["tie"] == "all" else 0)))
mistakes.add("final layer norms left out",
             "pre-LN closes each stack (encoder and decoder) with a layer norm of its own, outside the blocks.",
             _count_variant(norms=lambda s, c: c["norms"] - 4 * s["d"]))
mistakes.add("layer norm biases left out",
             "a layer norm has a weight and a bias, each d_model entries.",
             _count_variant(norms=lambda s, c: c["norms"] // 2))
mistakes.add("one cross-attention too few",
             "a decoder block attends twice, to itself and to the memory: two attention layers, against one "
             "per encoder block.",
             _count_variant(attention=lambda s, c: c["attention"] * 2 // 3))
mistakes.add("heads multiplied twice",
             "the projections were counted once per head at the full width d_model; the heads share W_query, "
             "W_key and W_value, each head using a slice of their outputs, so num_heads changes no count.",
             _count_variant(attention=lambda s, c: c["attention"] + 3 * s["n"] * 3 * (s["h"] - 1) * s["d"] ** 2))
mistakes.add("biases counted on W_query, W_key and W_value",
             "in this model W_query, W_key and W_value have no bias; out_proj has one.",
             _count_variant(attention=lambda s, c: c["attention"] + 3 * s["n"] * 3 * s["d"]))
mistakes.add("feed-forward biases left out",
             "both linear layers of the feed-forward network have a bias.",
             _count_variant(feed_forward=lambda s, c: 2 * s["n"] * 2 * s["d"] * s["f"]))


@mistakes.keep("counts computed as floats",
               "your counts have the right values, but they are floats: a true division (/) or float "
               "arithmetic gives a float even where the value is whole. The contract asks for Python ints.")
def _counts_as_floats(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie):
    counts = transformer_parameters(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie)
    return {key: value / 1 for key, value in counts.items()}


# Kept alternatives (correct answers in other styles) --------------------------------------


def _group_of(name):
    if "embedding" in name:
        return "embeddings"
    if name.startswith("out."):
        return "output"
    if "attn" in name:
        return "attention"
    if "ffn" in name:
        return "feed_forward"
    return "norms"


@alternatives.keep("measured on the package's model",
                   "tf.Transformer built on the meta device, its weights tied by assignment, every distinct "
                   "tensor counted once under the name PyTorch lists it by")
def _alt_measured(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie):
    _validate(d_model, num_heads, src_vocab, tgt_vocab, tie)
    with torch.device("meta"):
        model = tf.Transformer(src_vocab, tgt_vocab, d_model, num_heads, num_layers, d_ff)
    if tie in ("output", "all"):
        model.out.weight = model.tgt_embedding.weight
    if tie == "all":
        model.src_embedding.weight = model.tgt_embedding.weight
    counts = dict.fromkeys(("embeddings", "attention", "feed_forward", "norms", "output"), 0)
    for name, p in model.named_parameters():          # a shared tensor is listed once, by its first name
        counts[_group_of(name)] += p.numel()
    counts["total"] = sum(p.numel() for p in model.parameters())
    return counts


@alternatives.keep("counted from nn modules", "each kind of sublayer built once from nn modules, its numel "
                   "multiplied by how many the model holds")
def _alt_modules(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie):
    _validate(d_model, num_heads, src_vocab, tgt_vocab, tie)

    def size(*modules):
        return sum(p.numel() for m in modules for p in m.parameters())
    with torch.device("meta"):
        attention = size(*(nn.Linear(d_model, d_model, bias=False) for _ in range(3)), nn.Linear(d_model, d_model))
        ffn = size(nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model))
        norm = size(nn.LayerNorm(d_model))
        table = size(nn.Embedding(tgt_vocab, d_model))
        out = nn.Linear(d_model, tgt_vocab)
    tables = [table] if tie == "all" else [size(nn.Embedding(src_vocab, d_model, device="meta")), table]
    counts = {"embeddings": sum(tables), "attention": (num_layers + 2 * num_layers) * attention,
              "feed_forward": (num_layers + num_layers) * ffn, "norms": (2 * num_layers + 3 * num_layers + 2) * norm,
              "output": out.bias.numel() if tie != "none" else size(out)}
    counts["total"] = sum(counts.values())
    return counts


@alternatives.keep("block by block in a loop", "the stacks walked layer by layer, adding each sublayer's weights "
                   "and biases, the ties applied at the end")
def _alt_loop(d_model, num_heads, d_ff, num_layers, src_vocab, tgt_vocab, tie):
    _validate(d_model, num_heads, src_vocab, tgt_vocab, tie)
    counts = {"embeddings": src_vocab * d_model + tgt_vocab * d_model, "attention": 0, "feed_forward": 0,
              "norms": 0, "output": d_model * tgt_vocab + tgt_vocab}
    for stack_attentions, stack_norms in ((1, 2), (2, 3)):      # an encoder block, then a decoder block
        for _ in range(num_layers):
            for _ in range(stack_attentions):
                counts["attention"] += 3 * (d_model * d_model) + (d_model * d_model + d_model)
            counts["feed_forward"] += (d_model * d_ff + d_ff) + (d_ff * d_model + d_model)
            counts["norms"] += stack_norms * (d_model + d_model)
        counts["norms"] += d_model + d_model                    # the stack's final norm
    if tie != "none":
        counts["output"] -= d_model * tgt_vocab
    if tie == "all":
        counts["embeddings"] -= src_vocab * d_model
    counts["total"] = sum(counts.values())
    return counts


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch08_ex4", title="Where a Transformer's parameters go, with tied embeddings",
    name="transformer_parameters", reference=transformer_parameters, points=2,
    checks=[
        Check("d_model 8, 2 heads, d_ff 16, 2 layers, vocabularies 20 and 12: untied, then tie 'output'",
              _tie_calls, hint=_HINT, rtol=0.0, atol=0.0),
        Check("every count is a Python int (the first check's calls)", _tie_calls, hint=_TYPE_HINT,
              compare=_compare_count_types, weight=0.25),
        Check("tie 'all': one vocabulary of 15 (d_model 12, 4 heads, 1 layer), then of 7 (3 layers)", _all_calls,
              hint=_HINT, rtol=0.0, atol=0.0),
        Check("d_model 8 cut into 1, 2 and 4 heads (3 layers, tie 'output')", _heads_calls, hint=_HINT,
              rtol=0.0, atol=0.0),
        Check("d_model=10 with num_heads=4, and tie 'all' with vocabularies 20 and 12, raise ValueError naming "
              "both sizes", _bad_calls, must_mention=_mention_sizes, weight=ERROR_WEIGHT,
              hint="this check passes d_model=10 with num_heads=4, then tie='all' with two vocabularies; each "
                   "raises ValueError naming the two sizes that clash, with their values."),
        Check("random sizes, each tie (hidden)", _hidden_calls, public=False, hint=_HINT, rtol=0.0, atol=0.0),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
