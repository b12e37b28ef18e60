"""Chapter 3 exercises: attention scoring functions.

ch03_ex1  masked_softmax(scores, valid_lens)
ch03_ex2  scaled_dot_product_attention(queries, keys, values, valid_lens=None) -> (output, weights)
ch03_ex3  AdditiveAttention(query_size, key_size, num_hiddens)  (an nn.Module)
ch03_ex4  attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens) -> dict of shapes
ch03_ex5  check_attention_inputs(queries, keys, values, valid_lens=None) -> None or ValueError

The references of ex1-ex3 are the finished building blocks of
:mod:`attention_course.functional`. A row whose valid length is 0 gets all-zero
weights (so a zero output); the checks test it, and a kept mistake masks with a
finite -1e6, which makes such a row uniform over the padding.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .. import functional as F_att
from ..registry import Call, Check, Exercise, Mistake, register


def _shape(t) -> str:
    return str(tuple(t.shape))


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randint(g, low, high) -> int:
    return int(torch.randint(low, high + 1, (1,), generator=g))


# =========================================================== ch03_ex1 masked_softmax

def _mask(scores, valid_lens):
    return F_att.valid_mask(valid_lens, scores.shape[1], scores.shape[2])


def _validate_lens(scores, valid_lens):
    # The kept mistakes validate exactly like the reference: each is wrong in one way.
    batch, num_queries, num_keys = scores.shape
    F_att._check_valid_lens(valid_lens, batch, num_queries, num_keys, "scores", tuple(scores.shape))


def _ms_finite_mask(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    return torch.softmax(scores.masked_fill(~_mask(scores, valid_lens), -1e6), dim=-1)


def _ms_mask_after(scores, valid_lens):
    weights = torch.softmax(scores, dim=-1)
    if valid_lens is None:
        return weights
    _validate_lens(scores, valid_lens)
    return weights.masked_fill(~_mask(scores, valid_lens), 0.0)


def _ms_queries_axis(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=1)
    _validate_lens(scores, valid_lens)
    mask = _mask(scores, valid_lens)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=1)
    return torch.where(mask, weights, torch.zeros((), dtype=scores.dtype))


def _ms_off_by_one(scores, valid_lens):
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    _validate_lens(scores, valid_lens)
    mask = F_att.valid_mask(valid_lens + 1, scores.shape[1], scores.shape[2])
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.where(mask, weights, torch.zeros((), dtype=scores.dtype))


def _ms_one_d(seed):
    g = _gen(seed)
    scores = torch.randn(2, 3, 5, generator=g)
    return [Call(args=(scores, torch.tensor([2, 5]))),
            Call(args=(scores, None))]


def _ms_two_d(seed):
    g = _gen(seed)
    scores = torch.randn(2, 3, 4, generator=g)
    return [Call(args=(scores, torch.tensor([[1, 2, 4], [3, 3, 2]])))]


def _ms_zero(seed):
    g = _gen(seed)
    scores = torch.randn(3, 2, 4, generator=g)
    return [Call(args=(scores, torch.tensor([0, 2, 4]))),
            Call(args=(scores, torch.tensor([[0, 1], [4, 0], [2, 3]])))]


def _ms_bad_shape(seed):
    g = _gen(seed)
    scores = torch.randn(2, 3, 4, generator=g)
    return [Call(args=(scores, torch.tensor([1, 4]))),
            Call(args=(scores, torch.tensor([1, 2, 3]))),
            Call(args=(scores, torch.tensor([[1, 2, 3, 4], [1, 1, 1, 1]])))]


def _ms_words(call):
    scores, valid_lens = call.args
    return ["valid_lens", "scores", _shape(valid_lens), _shape(scores)]


def _ms_random(seed):
    g = _gen(seed)
    batch, num_queries, num_keys = _randint(g, 3, 6), _randint(g, 2, 5), _randint(g, 3, 8)
    scores = 3 * torch.randn(batch, num_queries, num_keys, generator=g)
    lens_1d = torch.randint(0, num_keys + 1, (batch,), generator=g)
    lens_1d[0] = 0  # always at least one empty sequence
    lens_2d = torch.randint(0, num_keys + 1, (batch, num_queries), generator=g)
    lens_2d[-1, 0] = 0
    return [Call(args=(scores, lens_1d)), Call(args=(scores, lens_2d))]


def _ms_float64(seed):
    g = _gen(seed)
    scores = torch.randn(2, 4, 6, generator=g, dtype=torch.float64)
    lens = torch.randint(0, 7, (2, 4), generator=g)
    lens[0, 1] = 0
    return [Call(args=(scores, lens))]


register(Exercise(
    label="ch03_ex1", title="Masked softmax", name="masked_softmax",
    reference=F_att.masked_softmax, points=2,
    checks=[
        Check("1-D valid_lens (one length per sequence), and valid_lens=None", _ms_one_d, seed=0,
              hint="build a boolean mask of shape (batch, num_queries, num_keys) from valid_lens, "
                   "give the masked scores -inf before a softmax over the last axis."),
        Check("2-D valid_lens (one length per query)", _ms_two_d, seed=1,
              hint="a 2-D valid_lens of shape (batch, num_queries) gives each query its own length; "
                   "compare the key positions with it along a new last axis."),
        Check("a valid length of 0 gives an all-zero row (not uniform, not NaN)", _ms_zero, seed=2,
              hint="a softmax over a row that is entirely -inf gives NaN; such a row must come out as zeros."),
        Check("valid_lens of the wrong shape raises ValueError naming valid_lens and scores and both shapes",
              _ms_bad_shape, seed=3, must_mention=_ms_words,
              hint="accept valid_lens of shape (batch,) or (batch, num_queries) only; otherwise raise a "
                   "ValueError whose message contains both names and both shapes as tuples."),
        Check("random shapes with empty sequences (hidden)", _ms_random, public=False,
              hint="check masking with random lengths between 0 and num_keys, in both 1-D and 2-D form."),
        Check("float64 scores keep their dtype (hidden)", _ms_float64, public=False,
              hint="return weights of the same dtype as scores, also where you write zeros."),
    ],
    mistakes=[
        Mistake("finite -1e6 mask",
                "a row whose valid length is 0 came out uniform over the padding: a large finite "
                "negative fill (like -1e6) gives every padded key the same weight when no key is valid. "
                "Such a row must be all zeros.",
                _ms_finite_mask),
        Mistake("mask applied after the softmax",
                "the padded keys took part in the softmax: zeroing them afterwards leaves rows that "
                "no longer sum to 1. Mask the scores before normalising.",
                _ms_mask_after),
        Mistake("softmax over the queries axis",
                "your weights are normalised over the queries axis (dim 1); each query's weights must "
                "sum to 1 over the keys, the last axis.",
                _ms_queries_axis),
        Mistake("one key too many",
                "off by one: a valid length of n keeps key positions 0 to n-1; position n is already padding.",
                _ms_off_by_one),
    ],
))


# ============================================= ch03_ex2 scaled_dot_product_attention

def _sdpa_with(scale_of_d, use_lens=True):
    def attention(queries, keys, values, valid_lens=None):
        scores = queries @ keys.transpose(1, 2) / scale_of_d(queries.shape[-1])
        weights = F_att.masked_softmax(scores, valid_lens if use_lens else None)
        return weights @ values, weights
    return attention


_sdpa_by_d = _sdpa_with(lambda d: d)
_sdpa_unscaled = _sdpa_with(lambda d: 1.0)
_sdpa_no_mask = _sdpa_with(math.sqrt, use_lens=False)


def _qkv(g, batch, num_queries, num_keys, d, d_v, dtype=torch.float32):
    return (torch.randn(batch, num_queries, d, generator=g, dtype=dtype),
            torch.randn(batch, num_keys, d, generator=g, dtype=dtype),
            torch.randn(batch, num_keys, d_v, generator=g, dtype=dtype))


def _sdpa_plain(seed):
    return [Call(args=_qkv(_gen(seed), 2, 3, 5, 4, 6))]


def _sdpa_one_d(seed):
    return [Call(args=_qkv(_gen(seed), 2, 3, 5, 4, 6) + (torch.tensor([3, 1]),))]


def _sdpa_zero(seed):
    q, k, v = _qkv(_gen(seed), 2, 3, 4, 8, 2)
    return [Call(args=(q, k, v), kwargs={"valid_lens": torch.tensor([[0, 2, 4], [1, 0, 3]])})]


def _sdpa_random(seed):
    g = _gen(seed)
    batch, num_queries, num_keys = _randint(g, 2, 5), _randint(g, 1, 6), _randint(g, 2, 9)
    d, d_v = _randint(g, 16, 64), _randint(g, 1, 7)
    q, k, v = _qkv(g, batch, num_queries, num_keys, d, d_v)
    lens = torch.randint(0, num_keys + 1, (batch,), generator=g)
    lens[0] = max(1, int(lens[0]))
    return [Call(args=(q, k, v)), Call(args=(q, k, v, lens))]


def _sdpa_grad(seed):
    g = _gen(seed)
    q, k, v = _qkv(g, 2, 4, 6, 8, 3, dtype=torch.float64)
    lens = torch.tensor([[2, 6, 1, 4], [3, 3, 5, 6]])
    return [Call(args=(q, k, v, lens), grads_of=(0, 1, 2))]


register(Exercise(
    label="ch03_ex2", title="Scaled dot-product attention",
    name="scaled_dot_product_attention", reference=F_att.scaled_dot_product_attention, points=2,
    checks=[
        Check("no mask: queries (2, 3, 4), keys (2, 5, 4), values (2, 5, 6)", _sdpa_plain, seed=0,
              hint="scores are the batched dot products of queries with keys divided by sqrt(d); "
                   "return the tuple (output, weights)."),
        Check("1-D valid_lens", _sdpa_one_d, seed=1,
              hint="pass valid_lens on to the masked softmax."),
        Check("2-D valid_lens with a zero length: that query's output is the zero vector", _sdpa_zero,
              seed=2, hint="pass valid_lens on to the masked softmax, and pool the values with its weights."),
        Check("random shapes with d up to 64 (hidden)", _sdpa_random, public=False,
              hint="check the scaling by sqrt(d) for larger d, and the masking."),
        Check("gradients reach queries, keys and values (hidden)", _sdpa_grad, public=False,
              hint="do not detach tensors or leave autograd; compute everything with torch operations."),
    ],
    mistakes=[
        Mistake("scaled by d", "the scores are divided by d; the variance argument gives sqrt(d).", _sdpa_by_d),
        Mistake("no scaling", "the scores are not scaled: divide the dot products by sqrt(d).", _sdpa_unscaled),
        Mistake("valid_lens ignored", "valid_lens is ignored: padded keys still get weight.", _sdpa_no_mask),
    ],
))


# ===================================================== ch03_ex3 AdditiveAttention

class _AddNoTanh(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1)
        weights = F_att.masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
        return weights @ values, weights


class _AddQueriesAxis(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)
        weights = torch.softmax(scores, dim=1)
        if valid_lens is not None:
            weights = _ms_queries_axis(scores, valid_lens)
        return weights @ values, weights


class _AddNoMask(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        return super().forward(queries, keys, values, None)


class _AddBiases(F_att.AdditiveAttention):
    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__(query_size, key_size, num_hiddens)
        self.W_q = nn.Linear(query_size, num_hiddens)
        self.W_k = nn.Linear(key_size, num_hiddens)
        self.w_v = nn.Linear(num_hiddens, 1)


def _add_state(g, query_size, key_size, num_hiddens):
    return {"W_q.weight": 0.5 * torch.randn(num_hiddens, query_size, generator=g),
            "W_k.weight": 0.5 * torch.randn(num_hiddens, key_size, generator=g),
            "w_v.weight": torch.randn(1, num_hiddens, generator=g)}


def _add_params(seed):
    g = _gen(seed)
    q, k, v = torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 2, generator=g)
    return [Call(init_args=(6, 4, 8), init_seed=seed, args=(q, k, v), report=("param_shapes",))]


def _add_one_d(seed):
    g = _gen(seed)
    state = _add_state(g, 6, 4, 8)
    q, k, v = torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 2, generator=g)
    return [Call(init_args=(6, 4, 8), init_seed=0, state_dict=state, args=(q, k, v, torch.tensor([4, 2])))]


def _add_two_d(seed):
    g = _gen(seed)
    state = _add_state(g, 3, 5, 4)
    q, k, v = torch.randn(2, 2, 3, generator=g), torch.randn(2, 4, 5, generator=g), torch.randn(2, 4, 3, generator=g)
    return [Call(init_args=(3, 5, 4), init_seed=0, state_dict=state, args=(q, k, v),
                 kwargs={"valid_lens": torch.tensor([[0, 3], [4, 1]])})]


def _add_random(seed):
    g = _gen(seed)
    batch, num_queries, num_keys = _randint(g, 2, 4), _randint(g, 2, 5), _randint(g, 3, 7)
    query_size, key_size, num_hiddens, d_v = (_randint(g, 2, 9) for _ in range(4))
    state = _add_state(g, query_size, key_size, num_hiddens)
    q = torch.randn(batch, num_queries, query_size, generator=g)
    k = torch.randn(batch, num_keys, key_size, generator=g)
    v = torch.randn(batch, num_keys, d_v, generator=g)
    lens = torch.randint(0, num_keys + 1, (batch, num_queries), generator=g)
    lens[0, 0] = 0
    init = (query_size, key_size, num_hiddens)
    return [Call(init_args=init, init_seed=1, state_dict=state, args=(q, k, v)),
            Call(init_args=init, init_seed=1, state_dict=state, args=(q, k, v, lens), grads_of=(0, 1))]


def _same_parameters(got, want, calls):
    for g, w in zip(got, want):
        if w["status"] == "raised":
            if g["status"] == "raised" and w["error_type"] in g.get("error_mro", []):
                continue
            return f"should raise {w['error_type']}"
        if g["status"] != "ok":
            return f"raised {g['error_type']}: {g['message'][:300]}"
        mine, theirs = g.get("extras", {}).get("param_shapes"), w["extras"]["param_shapes"]
        if mine != theirs:
            return f"the parameters (name: shape) are {mine}, expected {theirs}"
    return None


register(Exercise(
    label="ch03_ex3", title="Additive attention as a module", name="AdditiveAttention",
    reference=F_att.AdditiveAttention, kind="class", points=2,
    checks=[
        Check("parameters W_q, W_k, w_v with the right shapes and no biases", _add_params, seed=0,
              compare=_same_parameters,
              hint="create exactly three bias-free nn.Linear layers named W_q (query_size -> num_hiddens), "
                   "W_k (key_size -> num_hiddens) and w_v (num_hiddens -> 1)."),
        Check("queries of size 6, keys of size 4, 1-D valid_lens (given parameters)", _add_one_d, seed=1,
              hint="score every (query, key) pair with w_v(tanh(W_q q + W_k k)), then a masked softmax "
                   "over the keys, then pool the values; return (output, weights)."),
        Check("2-D valid_lens with a zero length (given parameters)", _add_two_d, seed=2,
              hint="pass valid_lens on to the masked softmax; a query with no valid key gets zero weights."),
        Check("random sizes, gradients reach queries and keys (hidden)", _add_random, public=False,
              hint="check broadcasting of queries against keys for random sizes, and keep autograd intact."),
    ],
    mistakes=[
        Mistake("forgot tanh",
                "the summed features W_q q + W_k k reach w_v without the tanh nonlinearity.", _AddNoTanh),
        Mistake("softmax over the queries axis",
                "the weights are normalised over the queries axis; each query's weights must sum to 1 "
                "over the keys.", _AddQueriesAxis),
        Mistake("valid_lens ignored", "valid_lens is ignored: padded keys still get weight.", _AddNoMask),
        Mistake("layers with biases",
                "the module's parameters must be exactly W_q.weight, W_k.weight and w_v.weight: "
                "the layers of additive attention have no bias term.", _AddBiases),
    ],
))


# ===================================================== ch03_ex4 attention_shapes

def attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens):
    batch, num_queries, _ = queries_shape
    num_keys, d_v = keys_shape[1], values_shape[2]
    return {"scores": (batch, num_queries, num_keys),
            "output": (batch, num_queries, d_v),
            "additive_features": (batch, num_queries, num_keys, num_hiddens)}


def _shapes_output_like_queries(queries_shape, keys_shape, values_shape, num_hiddens):
    out = attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens)
    out["output"] = tuple(queries_shape)
    return out


def _shapes_transposed(queries_shape, keys_shape, values_shape, num_hiddens):
    out = attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens)
    batch, num_queries, num_keys = out["scores"]
    out["scores"] = (batch, num_keys, num_queries)
    return out


def _shapes_no_pairs(queries_shape, keys_shape, values_shape, num_hiddens):
    out = attention_shapes(queries_shape, keys_shape, values_shape, num_hiddens)
    out["additive_features"] = (queries_shape[0], queries_shape[1], num_hiddens)
    return out


def _shapes_example(seed):
    return [Call(args=((2, 3, 4), (2, 5, 4), (2, 5, 6), 8))]


def _shapes_one_query(seed):
    return [Call(args=((4, 1, 16), (4, 10, 16), (4, 10, 3), 5)),
            Call(args=((1, 7, 2), (1, 3, 9), (1, 3, 4), 6))]


def _shapes_random(seed):
    g = _gen(seed)
    calls = []
    for _ in range(3):
        batch, num_queries, num_keys = _randint(g, 1, 9), _randint(g, 1, 9), _randint(g, 10, 20)
        d, d_k, d_v, h = _randint(g, 1, 9), _randint(g, 1, 9), _randint(g, 10, 20), _randint(g, 1, 30)
        calls.append(Call(args=((batch, num_queries, d), (batch, num_keys, d_k), (batch, num_keys, d_v), h)))
    return calls


register(Exercise(
    label="ch03_ex4", title="Shapes of the attention contract", name="attention_shapes",
    reference=attention_shapes, points=1,
    checks=[
        Check("the chapter's example: (2, 3, 4), (2, 5, 4), (2, 5, 6), num_hiddens=8", _shapes_example,
              seed=0, hint="return a dict with keys 'scores', 'output' and 'additive_features', each a "
                           "tuple of ints (not a torch.Size)."),
        Check("one query, many keys; and queries and keys of different sizes", _shapes_one_query, seed=1,
              hint="which sizes survive? the batch, the number of queries, and whatever the step "
                   "adds (keys, value size, hidden size)."),
        Check("random shapes (hidden)", _shapes_random, public=False,
              hint="work out each shape from the contract, for any sizes."),
    ],
    mistakes=[
        Mistake("output sized like the queries",
                "the output's last size comes from the values (d_v), not from the queries.",
                _shapes_output_like_queries),
        Mistake("scores transposed",
                "the scores have one row per query and one column per key.", _shapes_transposed),
        Mistake("additive features without the keys axis",
                "additive attention forms one hidden vector for every (query, key) pair before w_v.",
                _shapes_no_pairs),
    ],
))


# ================================================ ch03_ex5 check_attention_inputs

def check_attention_inputs(queries, keys, values, valid_lens=None):
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"queries and keys must share their last size d: queries has shape "
                         f"{_shape(queries)}, keys has shape {_shape(keys)}")
    if keys.shape[1] != values.shape[1]:
        raise ValueError(f"keys and values must have the same number of keys: keys has shape "
                         f"{_shape(keys)}, values has shape {_shape(values)}")
    if valid_lens is not None and tuple(valid_lens.shape) not in (tuple(queries.shape[:1]),
                                                                 tuple(queries.shape[:2])):
        raise ValueError(f"valid_lens has shape {_shape(valid_lens)}, but queries has shape "
                         f"{_shape(queries)}: expected (batch,) or (batch, num_queries)")
    return None


def _stand_in_values(keys):
    # Values that always fit the keys: lets a mistake skip exactly one rule.
    return torch.zeros(keys.shape[0], keys.shape[1], 1)


def _cai_no_count_check(queries, keys, values, valid_lens=None):
    return check_attention_inputs(queries, keys, _stand_in_values(keys), valid_lens)


def _cai_sizes_of_keys_values(queries, keys, values, valid_lens=None):
    check_attention_inputs(queries, keys, _stand_in_values(keys), valid_lens)
    if keys.shape[-1] != values.shape[-1]:
        raise ValueError(f"keys and values must agree: keys has shape {_shape(keys)}, "
                         f"values has shape {_shape(values)}")
    return None


def _cai_no_shapes(queries, keys, values, valid_lens=None):
    try:
        check_attention_inputs(queries, keys, values, valid_lens)
    except ValueError as error:
        names = [n for n in ("queries", "keys", "values", "valid_lens") if n in str(error)]
        raise ValueError(" and ".join(names) + " do not fit together") from None
    return None


def _cai_lens_per_key(queries, keys, values, valid_lens=None):
    if valid_lens is not None and valid_lens.dim() == 2:
        # Confuses num_queries with num_keys for a 2-D valid_lens.
        check_attention_inputs(queries, keys, values, None)
        if tuple(valid_lens.shape) != (queries.shape[0], keys.shape[1]):
            raise ValueError(f"valid_lens has shape {_shape(valid_lens)}, but queries has shape "
                             f"{_shape(queries)}: expected (batch,) or (batch, num_keys)")
        return None
    return check_attention_inputs(queries, keys, values, valid_lens)


def _cai_good(g, batch=2, num_queries=3, num_keys=5, d=4, d_v=6):
    return _qkv(g, batch, num_queries, num_keys, d, d_v)


def _cai_valid(seed):
    g = _gen(seed)
    q, k, v = _cai_good(g)
    return [Call(args=(q, k, v)), Call(args=(q, k, v, torch.tensor([5, 2]))),
            Call(args=(q, k, v), kwargs={"valid_lens": torch.tensor([[1, 2, 3], [5, 0, 4]])})]


def _cai_words(call):
    queries, keys, values = call.args[:3]
    valid_lens = call.args[3] if len(call.args) > 3 else call.kwargs.get("valid_lens")
    if queries.shape[-1] != keys.shape[-1]:
        return ["queries", "keys", _shape(queries), _shape(keys)]
    if keys.shape[1] != values.shape[1]:
        return ["keys", "values", _shape(keys), _shape(values)]
    return ["valid_lens", "queries", _shape(valid_lens), _shape(queries)]


def _cai_d_mismatch(seed):
    g = _gen(seed)
    q, k, v = _cai_good(g)
    return [Call(args=(q, k, v)), Call(args=(q, torch.randn(2, 5, 3, generator=g), v))]


def _cai_count_mismatch(seed):
    g = _gen(seed)
    q, k, v = _cai_good(g)
    return [Call(args=(q, k, v)), Call(args=(q, k, torch.randn(2, 4, 6, generator=g)))]


def _cai_lens_mismatch(seed):
    g = _gen(seed)
    q, k, v = _cai_good(g)
    return [Call(args=(q, k, v, torch.tensor([1, 2]))),
            Call(args=(q, k, v, torch.tensor([1, 2, 3]))),
            Call(args=(q, k, v, torch.tensor([[1, 2, 3, 4, 5], [1, 1, 1, 1, 1]])))]


def _cai_random(seed):
    g = _gen(seed)
    batch, num_queries, num_keys = _randint(g, 1, 4), _randint(g, 2, 5), _randint(g, 6, 9)
    d, d_v = _randint(g, 2, 5), _randint(g, 6, 9)
    q, k, v = _cai_good(g, batch, num_queries, num_keys, d, d_v)
    lens = torch.randint(0, num_keys + 1, (batch, num_queries), generator=g)
    return [Call(args=(q, k, v, lens)),
            Call(args=(q, torch.randn(batch, num_keys, d + 1, generator=g), v)),
            Call(args=(q, k, torch.randn(batch, num_keys + 2, d_v, generator=g))),
            Call(args=(q, k, v, torch.randint(0, num_keys, (batch, num_keys), generator=g)))]


register(Exercise(
    label="ch03_ex5", title="Clear errors for mismatched shapes", name="check_attention_inputs",
    reference=check_attention_inputs, points=1,
    checks=[
        Check("inputs that fit return None (no valid_lens, 1-D and 2-D valid_lens)", _cai_valid, seed=0,
              hint="valid inputs must pass silently: return None."),
        Check("queries and keys of different size d raise ValueError naming both and their shapes",
              _cai_d_mismatch, seed=1, must_mention=_cai_words,
              hint="compare the last size of queries with the last size of keys."),
        Check("keys and values with different numbers of keys raise ValueError naming both and their shapes",
              _cai_count_mismatch, seed=2, must_mention=_cai_words,
              hint="compare the number of keys (axis 1) of keys and values."),
        Check("valid_lens of the wrong shape raises ValueError naming valid_lens, queries and their shapes",
              _cai_lens_mismatch, seed=3, must_mention=_cai_words,
              hint="valid_lens must have shape (batch,) or (batch, num_queries)."),
        Check("random shapes, each kind of mismatch (hidden)", _cai_random, public=False,
              must_mention=_cai_words, hint="check every rule of the contract, for any sizes."),
    ],
    mistakes=[
        Mistake("no keys/values check",
                "keys and values with different numbers of keys were accepted: every key needs exactly "
                "one value.", _cai_no_count_check),
        Mistake("compared the sizes of keys and values",
                "you compared the feature sizes of keys and values, which may differ (d and d_v); "
                "what must agree is their number of keys.", _cai_sizes_of_keys_values),
        Mistake("message without the shapes",
                "the error names the arguments but not their shapes: write each shape as a tuple, "
                "e.g. (2, 3, 4).", _cai_no_shapes),
        Mistake("2-D valid_lens per key",
                "a 2-D valid_lens has one length per query, shape (batch, num_queries), not "
                "(batch, num_keys).", _cai_lens_per_key),
    ],
))
