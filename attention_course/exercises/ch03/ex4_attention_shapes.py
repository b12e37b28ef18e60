r"""ch03_ex4: Shapes of the attention contract.

Write `attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens)`. The first
three arguments are the shapes of `queries`, `keys` and `values` as tuples of three ints,
`(batch, num_queries, d_q)`, `(batch, num_keys, d_k)` and `(batch, num_keys, d_v)`; assume
they fit together (for additive attention `d_q` and `d_k` may differ). `num_hiddens` is the
hidden size $h$ of additive attention. Return a dict with exactly three keys, each mapped to
a tuple of ints (a `torch.Size` is a tuple, so it will do; a list will not):

- `"scores"`: the shape of the scores (and weights) tensor;
- `"output"`: the shape of the attention output;
- `"additive_features"`: the shape of the tensor that additive attention passes through
  $\tanh$, just before $\mathbf{w}_v$.
"""
from __future__ import annotations

from collections import namedtuple
import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens):
    batch, num_queries, _ = queries_shape
    num_keys, d_v = keys_shape[1], values_shape[2]
    return {"scores": (batch, num_queries, num_keys),
            "output": (batch, num_queries, d_v),
            "additive_features": (batch, num_queries, num_keys, num_hiddens)}


# Inputs of the public and hidden checks ---------------------------------------------------


# At the check's own seed each case is the one its name gives (what a release ships); at any other
# seed (grading) its sizes are redrawn, all different from one another as in the public case (so a
# swapped or misplaced size shows), keeping what the check is about.


def _distinct_sizes(g, count, low, high):
    """``count`` different ints in [low, high], drawn from ``g``."""
    return [low + int(i) for i in torch.randperm(high - low + 1, generator=g)[:count]]


def _shapes_example(seed):
    if seed == 0:
        return [Call(args=((2, 3, 4), (2, 5, 4), (2, 5, 6), 8))]
    # batch, num_queries, d (= d_k), num_keys, d_v, h: six different sizes, never the public six
    g = gen(seed)
    sizes = (2, 3, 4, 5, 6, 8)
    while sizes == (2, 3, 4, 5, 6, 8):
        sizes = tuple(_distinct_sizes(g, 6, 2, 13))
    batch, num_queries, d, num_keys, d_v, h = sizes
    return [Call(args=((batch, num_queries, d), (batch, num_keys, d), (batch, num_keys, d_v), h))]


def _shapes_one_query(seed):
    if seed == 1:
        return [Call(args=((4, 1, 16), (4, 10, 16), (4, 10, 3), 5)),
                Call(args=((1, 7, 2), (1, 3, 9), (1, 3, 4), 6))]
    g = gen(seed)
    # one query against many keys (more than any other size), d_q = d_k
    batch, d, d_v, h = _distinct_sizes(g, 4, 2, 9)
    num_keys = randint(g, 10, 20)
    one_query = Call(args=((batch, 1, d), (batch, num_keys, d), (batch, num_keys, d_v), h))
    # d_q and d_k different, batch 1 or more, every size different from the others
    num_queries, num_keys, d_q, d_k, d_v, h = _distinct_sizes(g, 6, 2, 12)
    batch = randint(g, 1, 3)
    return [one_query, Call(args=((batch, num_queries, d_q), (batch, num_keys, d_k), (batch, num_keys, d_v), h))]


def _shapes_random(seed):
    g = gen(seed)
    calls = []
    for _ in range(3):
        batch, num_queries, num_keys = randint(g, 1, 9), randint(g, 1, 9), randint(g, 10, 20)
        d, d_k, d_v, h = randint(g, 1, 9), randint(g, 1, 9), randint(g, 10, 20), randint(g, 1, 30)
        calls.append(Call(args=((batch, num_queries, d), (batch, num_keys, d_k), (batch, num_keys, d_v), h)))
    return calls


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("output sized like the queries",
               "the output's last size comes from the values (d_v), not from the queries.")
def _shapes_output_like_queries(queries_shape, keys_shape, values_shape, num_hiddens):
    out = attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens)
    out["output"] = tuple(queries_shape)
    return out


@mistakes.keep("scores transposed",
               "the scores have one row per query and one column per key.")
def _shapes_transposed(queries_shape, keys_shape, values_shape, num_hiddens):
    out = attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens)
    batch, num_queries, num_keys = out["scores"]
    out["scores"] = (batch, num_keys, num_queries)
    return out


@mistakes.keep("additive features without the keys axis",
               "additive attention forms one hidden vector for every (query, key) pair before w_v.")
def _shapes_no_pairs(queries_shape, keys_shape, values_shape, num_hiddens):
    out = attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens)
    out["additive_features"] = (queries_shape[0], queries_shape[1], num_hiddens)
    return out


@mistakes.keep("lists instead of tuples",
               "the shapes are right but are lists; the contract asks for tuples (a torch.Size is a "
               "tuple too).")
def _shapes_lists(queries_shape, keys_shape, values_shape, num_hiddens):
    return {k: list(v) for k, v in attention_shapes(queries_shape, keys_shape, values_shape,
                                                     num_hiddens).items()}


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("torch.Size values",
                   "torch.Size, a tuple subclass")
def _shapes_alt_torch_size(queries_shape, keys_shape, values_shape, num_hiddens):
    """torch.Size objects (a tuple subclass)."""
    b, nq = queries_shape[0], queries_shape[1]
    nk = keys_shape[1]
    return {"scores": torch.Size([b, nq, nk]),
            "output": torch.Size([b, nq, values_shape[-1]]),
            "additive_features": torch.Size([b, nq, nk, num_hiddens])}


@alternatives.keep("meta-device tensors",
                   "the products computed on the meta device, shapes read off")
def _shapes_alt_meta(queries_shape, keys_shape, values_shape, num_hiddens):
    """Run the computation on the meta device (shapes only, no data) and read the shapes off."""
    q = torch.empty(queries_shape, device="meta")
    k = torch.empty(keys_shape, device="meta")
    v = torch.empty(values_shape, device="meta")
    scores = q[..., :1] @ k[..., :1].transpose(1, 2)
    output = scores @ v
    hidden = torch.empty(*queries_shape[:2], 1, num_hiddens, device="meta") + \
        torch.empty(keys_shape[0], 1, keys_shape[1], num_hiddens, device="meta")
    return {"scores": tuple(scores.shape), "output": tuple(output.shape),
            "additive_features": tuple(hidden.shape)}


_Shape3 = namedtuple("_Shape3", "batch rows cols")


@alternatives.keep("named tuples",
                   "a namedtuple for the 3-D shapes, tuple concatenation")
def _shapes_alt_named(queries_shape, keys_shape, values_shape, num_hiddens):
    """Named tuples, and tuple concatenation."""
    scores = _Shape3(queries_shape[0], queries_shape[1], keys_shape[1])
    return dict(scores=scores, output=_Shape3(scores.batch, scores.rows, values_shape[2]),
                additive_features=tuple(scores) + (num_hiddens,))


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch03_ex4", title="Shapes of the attention contract", name="attention_shapes",
    reference=attention_shapes, points=1,
    checks=[
        Check("the chapter's example: (2, 3, 4), (2, 5, 4), (2, 5, 6), num_hiddens=8", _shapes_example,
              seed=0, hint="this check compares the dict (its three keys, each a tuple of ints) for the "
                           "chapter's running example: work each shape out from the contract's table."),
        Check("one query, many keys; and queries and keys of different sizes", _shapes_one_query, seed=1,
              hint="this check uses one query against many keys, and queries and keys of different sizes: "
                   "each of the three shapes follows from the contract's table for any sizes."),
        Check("random shapes (hidden)", _shapes_random, public=False,
              hint="this check compares the three shapes for random sizes."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
