"""ch06_ex2: From per-head weights to one fused projection.

A wrapper with `num_heads` heads stores, for each head `h`, a query weight of shape
`(head_dim, d_in)` (an `nn.Linear` layout), and likewise for keys and values. Write
`fuse_head_weights(query_weights, key_weights, value_weights)` where each argument stacks these
per-head weights into a float tensor of shape `(num_heads, head_dim, d_in)`. Return the fused
weight of shape `(3 * num_heads * head_dim, d_in)` in the layout of `nn.MultiheadAttention`'s
`in_proj_weight`: its first `d_out = num_heads * head_dim` rows are the efficient layer's
`W_query` weight (row `h * head_dim + r` is row `r` of head `h`), the next `d_out` rows its
`W_key` weight, the last `d_out` rows its `W_value` weight; same dtype as the arguments. Raise
`ValueError` when the three are not 3-D tensors of one shape, with a message that names the faulty
argument: one that is not 3-D or, when all three are 3-D, the one whose shape differs from the
other two (naming all three is fine too).
"""
from __future__ import annotations

import torch

from ...checks.checking import compare_outcome, mentions
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, shape_of
from ._common import _PUBLIC_SEED

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def fuse_head_weights(query_weights, key_weights, value_weights):
    """Stack per-head (num_heads, head_dim, d_in) weights into a (3 * d_out, d_in) in_proj_weight."""
    tensors = {"query_weights": query_weights, "key_weights": key_weights, "value_weights": value_weights}
    shapes = {name: shape_of(t) for name, t in tensors.items()}
    if any(not isinstance(t, torch.Tensor) or t.dim() != 3 for t in tensors.values()) \
            or len(set(shapes.values())) != 1:
        raise ValueError("query_weights, key_weights and value_weights must be 3-D tensors of the same shape "
                         "(num_heads, head_dim, d_in), got shapes "
                         + ", ".join(f"{name} {shape}" for name, shape in shapes.items()))
    return torch.cat([t.reshape(-1, t.shape[-1]) for t in tensors.values()], dim=0)


# Inputs of the public and hidden checks ---------------------------------------------------


def _fuse_main_calls(seed):
    g = gen(seed)
    return [Call(args=tuple(torch.randn(3, 2, 4, generator=g) for _ in range(3)))]


def _fuse_float64_calls(seed):
    """float64 weights (the result keeps their dtype): 4 heads of 3 from d_in=5 at the public seed,
    2 to 5 heads of 1 to 4 from d_in 2 to 6 at any other."""
    g = gen(seed)
    shape = (4, 3, 5) if seed == _PUBLIC_SEED else (randint(g, 2, 5), randint(g, 1, 4), randint(g, 2, 6))
    return [Call(args=tuple(torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(3)))]


def _fuse_bad_calls(seed):
    """A value_weights of another d_in, a key_weights with one head more, three 2-D weights: 2 heads of
    3 from d_in=4 at the public seed, other sizes (and values) at any other."""
    g = gen(seed)
    if seed == _PUBLIC_SEED:
        heads, head_dim, d_in, other_d_in = 2, 3, 4, 5
    else:
        heads, head_dim, d_in = randint(g, 1, 4), randint(g, 1, 4), randint(g, 2, 6)
        other_d_in = d_in + randint(g, 1, 2)
    q, k = torch.randn(heads, head_dim, d_in, generator=g), torch.randn(heads, head_dim, d_in, generator=g)
    return [Call(args=(q, k, torch.randn(heads, head_dim, other_d_in, generator=g))),
            Call(args=(q, torch.randn(heads + 1, head_dim, d_in, generator=g),
                       torch.randn(heads, head_dim, d_in, generator=g))),
            Call(args=(q.reshape(-1, d_in), k.reshape(-1, d_in), k.reshape(-1, d_in)))]


def _fuse_hidden_calls(seed):
    g = gen(seed)
    calls = []
    for heads in (randint(g, 2, 6), 1):
        shape = (heads, randint(g, 1, 5), randint(g, 2, 7))
        calls.append(Call(args=tuple(torch.randn(*shape, generator=g) for _ in range(3))))
    return calls


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


# Kept mistakes, each with its hint --------------------------------------------------------


def _fuse_checked(body):
    def impl(query_weights, key_weights, value_weights):
        ws = (query_weights, key_weights, value_weights)
        if any(w.dim() != 3 for w in ws) or len({tuple(w.shape) for w in ws}) != 1:
            raise ValueError("query_weights, key_weights and value_weights must have one 3-D shape, got "
                             + ", ".join(str(tuple(w.shape)) for w in ws))
        return body(*ws)
    return impl


mistakes.add("rows interleaved across heads",
             "you ordered the rows by their index inside a head first (row 0 of every head, then row 1, "
             "...); each head must keep its rows together, head 0's block first.",
             _fuse_checked(lambda q, k, v: torch.cat([w.transpose(0, 1).reshape(-1, w.shape[-1])
                                                      for w in (q, k, v)])))


mistakes.add("query, key and value blocks per head",
             "you grouped the rows per head (head 0's query, key and value, then head 1's ...); the fused "
             "weight holds all query rows first, then all key rows, then all value rows.",
             _fuse_checked(lambda q, k, v: torch.stack([q, k, v], dim=1).reshape(-1, q.shape[-1])))


mistakes.add("transposed layout",
             "nn.Linear (and in_proj_weight) store a weight as (out_features, in_features): the result is "
             "(3 * num_heads * head_dim, d_in), not its transpose.",
             _fuse_checked(lambda q, k, v: torch.cat([w.reshape(-1, w.shape[-1]) for w in (q, k, v)]).T))


mistakes.add("no shape check",
             "weights of different shapes must raise ValueError naming the faulty argument, not be "
             "stacked anyway or fail with an unclear error.",
             lambda q, k, v: torch.cat([w.reshape(-1, w.shape[-1]) for w in (q, k, v)]))


mistakes.add("result in float64",
             "your rows are in the right order but the result is float64: it must have the dtype of "
             "the arguments (float32 here); compute in float64 if you like, then cast back.",
             _fuse_checked(lambda q, k, v: torch.cat([w.double().reshape(-1, w.shape[-1]) for w in (q, k, v)])))



@mistakes.keep("result always float32",
               "your rows are in the right order but the result is float32 for float64 weights: it must have "
               "the dtype of the arguments, whatever it is (a new tensor is float32 unless it is told "
               "otherwise).")
def _fuse_into_float32(query_weights, key_weights, value_weights):
    ws = (query_weights, key_weights, value_weights)
    if any(w.dim() != 3 for w in ws) or len({tuple(w.shape) for w in ws}) != 1:
        raise ValueError("query_weights, key_weights and value_weights must have one 3-D shape, got "
                         + ", ".join(str(tuple(w.shape)) for w in ws))
    num_heads, head_dim, d_in = query_weights.shape
    d_out = num_heads * head_dim
    fused = torch.zeros(3 * d_out, d_in)                   # float32, whatever the weights' dtype
    for block, w in enumerate(ws):
        fused[block * d_out:(block + 1) * d_out] = w.reshape(d_out, d_in)
    return fused

# Kept alternatives (correct answers in other styles) --------------------------------------


def _fuse_validate(query_weights, key_weights, value_weights):
    shapes = [tuple(w.shape) for w in (query_weights, key_weights, value_weights)]
    if any(len(sh) != 3 for sh in shapes) or len(set(shapes)) > 1:
        raise ValueError(f"query_weights {shapes[0]}, key_weights {shapes[1]} and value_weights {shapes[2]} "
                         "must share one (num_heads, head_dim, d_in) shape")


@alternatives.keep("flatten and cat",
                   "w.flatten(0, 1) for each, torch.cat")
def _fuse_alt_flatten(query_weights, key_weights, value_weights):
    _fuse_validate(query_weights, key_weights, value_weights)
    return torch.cat([w.flatten(0, 1) for w in (query_weights, key_weights, value_weights)])


@alternatives.keep("loops over rows",
                   "every row appended in order, torch.stack")
def _fuse_alt_loops(query_weights, key_weights, value_weights):
    _fuse_validate(query_weights, key_weights, value_weights)
    rows = []
    for w in (query_weights, key_weights, value_weights):
        for head in w:
            for row in head:
                rows.append(row)
    return torch.stack(rows)


@alternatives.keep("one stack, one reshape",
                   "torch.stack into (3, heads, head_dim, d_in), reshape")
def _fuse_alt_stack(query_weights, key_weights, value_weights):
    _fuse_validate(query_weights, key_weights, value_weights)
    stacked = torch.stack([query_weights, key_weights, value_weights])   # (3, heads, head_dim, d_in)
    return stacked.reshape(-1, stacked.shape[-1])


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch06_ex2", title="From per-head weights to one fused projection", name="fuse_head_weights",
    reference=fuse_head_weights, points=1,
    checks=[
        Check("3 heads of size 2 from d_in=4", _fuse_main_calls, hint=_FUSE_HINT),
        Check("float64 weights, 4 heads of size 3 from d_in=5", _fuse_float64_calls, hint=_FUSE_HINT),
        Check("mismatched or non-3-D shapes raise ValueError naming a faulty argument", _fuse_bad_calls,
              compare=_compare_fuse_errors, weight=0.4,
              hint="this check passes a value_weights of another shape, a key_weights of another shape, and "
                   "three 2-D weights: each must raise ValueError before stacking, and the message must name "
                   "an argument that is not 3-D, or the one whose shape differs from the other two (naming "
                   "all three is fine)."),
        Check("random sizes, and a single head (hidden)", _fuse_hidden_calls, public=False, hint=_FUSE_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
