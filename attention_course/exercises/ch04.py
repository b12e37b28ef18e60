"""Chapter 4 -- Self-attention, step by step.

Exercises
---------
* ``ch04_ex1`` ``context_vector(inputs, query_index)``: one context vector of simple
  (unprojected, unscaled) self-attention (any style: the contract does not ask for loops).
* ``ch04_ex2`` ``simple_self_attention(inputs)``: the same for all queries at once,
  in matrix form, for 2-D or batched 3-D inputs; returns ``(weights, contexts)``.
* ``ch04_ex3`` ``SelfAttention(d_in, d_out, qkv_bias=False)``: scaled dot-product
  self-attention with ``nn.Linear`` projections ``W_query``, ``W_key``, ``W_value``.
* ``ch04_ex4`` ``attend_permuted(inputs, perm, W_query, W_key, W_value)``: attention
  on permuted tokens, and its output put back into the original token order.
* ``ch04_ex5`` ``sinusoidal_encoding(num_positions, d_model)``: the sinusoidal
  positional encoding of Vaswani et al. (2017), interleaved sin/cos columns, float32.
* ``ch04_ex6`` ``linear_state_dict(W_query, W_key, W_value)``: the ``(d_in, d_out)``
  matrices of the chapter's ``nn.Parameter`` module as a state dict for exercise 3's
  ``nn.Linear`` module (transfer: ``nn.Linear`` stores ``(d_out, d_in)``).
* ``ch04_ex7`` ``offset_matrix(k, d_model)``: the block-diagonal rotation ``M_k`` with
  ``M_k @ PE[pos] == PE[pos + k]`` for every position (transfer: the chapter shows one
  2x2 block; negative offsets, the pair layout and validation are the student's).

Decisions (documented in the notebook's contracts as well):

* ``query_index`` must satisfy ``0 <= query_index < num_tokens``; negative indices
  are refused with a ``ValueError`` naming ``query_index``.
* ``sinusoidal_encoding`` requires ``num_positions >= 1`` and an even ``d_model >= 2``
  (sines and cosines come in pairs); otherwise ``ValueError`` naming the argument.
* A check that expects an error holds only failing calls, so the test that caps
  error-message checks at a fifth of the chapter's points counts it; an untouched stub
  still fails it with the ``NotImplementedError`` reason (which names the label).
* Every exercise keeps at least three correct alternatives in other styles (loops,
  einsum, float64 inside, torch's fused SDPA, LLMs-from-scratch's and d2l's layouts,
  the Annotated Transformer's exp-log frequencies); the tests prove they pass. Error-
  message checks carry half the weight of a value check.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from torch.nn import functional as F

from ..registry import Alternative, Call, Check, Exercise, Mistake, register

# The chapter's running example: six tokens with hand-chosen 3-d embeddings
# (the same numbers as in the notebook).
TOKENS = ["owls", "hunt", "mice", "on", "quiet", "nights"]
INPUTS = torch.tensor([
    [0.9, 0.2, 0.4],   # owls
    [0.3, 0.9, 0.2],   # hunt
    [0.8, 0.3, 0.1],   # mice
    [0.1, 0.2, 0.3],   # on
    [0.2, 0.4, 0.7],   # quiet
    [0.4, 0.1, 0.9],   # nights
])


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ======================================================================= ch04_ex1

def context_vector(inputs, query_index):
    """Context vector of token ``query_index`` in simple self-attention, shape (d_in,)."""
    num_tokens = inputs.shape[0]
    if not 0 <= query_index < num_tokens:
        raise ValueError(f"query_index must satisfy 0 <= query_index < num_tokens = {num_tokens} "
                         f"(inputs has shape {tuple(inputs.shape)}), got {query_index}")
    scores = inputs @ inputs[query_index]
    weights = torch.softmax(scores, dim=0)
    return weights @ inputs


def _cv_check_index(inputs, query_index):
    num_tokens = inputs.shape[0]
    if not 0 <= query_index < num_tokens:
        raise ValueError(f"query_index {query_index} out of range for {num_tokens} tokens")


def _cv_sum_normalised(inputs, query_index):
    _cv_check_index(inputs, query_index)
    scores = inputs @ inputs[query_index]
    return (scores / scores.sum()) @ inputs


def _cv_scaled(inputs, query_index):
    _cv_check_index(inputs, query_index)
    scores = inputs @ inputs[query_index] / math.sqrt(inputs.shape[1])
    return torch.softmax(scores, dim=0) @ inputs


def _cv_no_range_check(inputs, query_index):
    scores = inputs @ inputs[query_index]
    return torch.softmax(scores, dim=0) @ inputs


def _cv_sentence_calls(seed):
    return [Call(args=(INPUTS.clone(), i)) for i in range(len(TOKENS))]


def _cv_random_calls(seed):
    g = _gen(seed)
    x32 = torch.randn(7, 5, generator=g)
    x64 = torch.randn(4, 3, generator=g, dtype=torch.float64)
    q = int(torch.randint(0, 7, (1,), generator=g))
    return [Call(args=(x32, q)), Call(args=(x64, 3))]


def _cv_bad_calls(seed):
    return [Call(args=(INPUTS.clone(), 6)),
            Call(args=(INPUTS.clone(), -1)),
            Call(args=(INPUTS.clone(), 100))]


def _cv_big_calls(seed):
    g = _gen(seed)
    x = torch.randn(12, 8, generator=g)
    return [Call(args=(x, i)) for i in (0, 5, 11)]


def _cv_alt_loops(inputs, query_index):
    # Python loops over tokens and columns, a max-shifted softmax in Python floats.
    num_tokens, d_in = inputs.shape
    if query_index < 0 or query_index >= num_tokens:
        raise ValueError(f"query_index={query_index} is outside 0..{num_tokens - 1}")
    query = inputs[query_index].tolist()
    rows = inputs.tolist()
    scores = [sum(a * b for a, b in zip(row, query)) for row in rows]
    top = max(scores)
    exps = [math.exp(v - top) for v in scores]
    total = sum(exps)
    context = [0.0] * d_in
    for row, e in zip(rows, exps):
        for j in range(d_in):
            context[j] += e / total * row[j]
    return torch.tensor(context, dtype=inputs.dtype)


def _cv_alt_einsum64(inputs, query_index):
    # einsum in float64, cast back to the input dtype.
    if not (isinstance(query_index, int) and 0 <= query_index < inputs.size(0)):
        raise ValueError(f"bad query_index {query_index!r} for inputs of shape {inputs.shape}")
    x = inputs.double()
    weights = torch.softmax(torch.einsum("td,d->t", x, x[query_index]), dim=0)
    return torch.einsum("t,td->d", weights, x).to(inputs.dtype)


def _cv_alt_all_rows(inputs, query_index):
    # All context vectors as matrices (the next section's form), then one row picked.
    if query_index not in range(len(inputs)):
        raise ValueError("query_index must be one of the token positions")
    weights = torch.softmax(inputs @ inputs.T, dim=-1)
    return (weights @ inputs)[query_index]


register(Exercise(
    label="ch04_ex1", title="One context vector",
    name="context_vector", reference=context_vector, points=2,
    checks=[
        Check("the chapter's sentence, every token as the query", _cv_sentence_calls, seed=0,
              hint="score = dot product of the query with each token, weights = softmax of the scores, "
                   "context = weighted sum of the token embeddings."),
        Check("7 random tokens of width 5 (float32) and 4 of width 3 (float64)", _cv_random_calls, seed=1,
              hint="this check uses random tokens in float32 and in float64: the context vector has shape "
                   "(d_in,) and the dtype of inputs, and its values are compared too."),
        Check("query_index out of range (6, -1, 100) raises ValueError naming query_index",
              _cv_bad_calls, seed=0, must_mention=["query_index"], weight=0.5,
              hint="check 0 <= query_index < num_tokens before computing anything, and name query_index "
                   "in the message."),
        Check("12 random tokens of width 8 (hidden)", _cv_big_calls, seed=2, public=False,
              hint="score = dot product, weights = softmax over all tokens, context = weighted sum."),
    ],
    mistakes=[
        Mistake("sum-normalised scores",
                "you divided the scores by their sum; attention weights come from the softmax "
                "(exponentiate, then normalise).", _cv_sum_normalised),
        Mistake("scaled by sqrt(d_in)",
                "you divided the scores by sqrt(d_in); this first, simple form of self-attention uses "
                "the raw dot products (the scaling comes with the trainable projections).", _cv_scaled),
        Mistake("no range check",
                "Python indexing accepts negative or too-large positions differently; test "
                "0 <= query_index < num_tokens yourself and raise ValueError naming query_index.",
                _cv_no_range_check),
    ],
    alternatives=[
        Alternative("Python loops", "loops over tokens and columns, max-shifted exp in Python floats",
                    _cv_alt_loops),
        Alternative("einsum in float64", "einsum for scores and sum, computed in float64, cast back",
                    _cv_alt_einsum64),
        Alternative("matrix form, one row", "every context vector as matrix products, then row query_index",
                    _cv_alt_all_rows),
    ],
))


# ======================================================================= ch04_ex2

def simple_self_attention(inputs):
    """Return ``(weights, contexts)`` of unscaled self-attention over the last two axes."""
    if inputs.dim() < 2:
        raise ValueError(f"inputs must have shape (num_tokens, d_in) or (batch, num_tokens, d_in), "
                         f"got shape {tuple(inputs.shape)}")
    scores = inputs @ inputs.transpose(-2, -1)
    weights = torch.softmax(scores, dim=-1)
    return weights, weights @ inputs


def _sa_check(inputs):
    if inputs.dim() < 2:
        raise ValueError(f"inputs has shape {tuple(inputs.shape)}")


def _ssa_query_axis(inputs):
    _sa_check(inputs)
    weights = torch.softmax(inputs @ inputs.transpose(-2, -1), dim=-2)
    return weights, weights @ inputs


def _ssa_scaled(inputs):
    _sa_check(inputs)
    scores = inputs @ inputs.transpose(-2, -1) / math.sqrt(inputs.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    return weights, weights @ inputs


def _ssa_first_axes(inputs):
    _sa_check(inputs)
    weights = torch.softmax(inputs @ inputs.transpose(0, 1), dim=-1)
    return weights, weights @ inputs


def _ssa_dot_T(inputs):
    # LLMs-from-scratch's `inputs @ inputs.T`: right for one sequence, not for a batch.
    _sa_check(inputs)
    weights = torch.softmax(inputs @ inputs.T, dim=-1)
    return weights, weights @ inputs


def _ssa_sentence_calls(seed):
    return [Call(args=(INPUTS.clone(),))]


def _ssa_batch_calls(seed):
    g = _gen(seed)
    return [Call(args=(torch.randn(2, 5, 4, generator=g),))]


def _ssa_bad_calls(seed):
    return [Call(args=(torch.tensor([0.5, 1.0, 2.0]),)), Call(args=(torch.linspace(0.0, 1.0, 5),))]


def _ssa_big_calls(seed):
    g = _gen(seed)
    return [Call(args=(torch.randn(3, 9, 6, generator=g, dtype=torch.float64),)),
            Call(args=(torch.randn(7, 3, generator=g),))]


def _ssa_alt_einsum(inputs):
    if inputs.ndim not in (2, 3):
        raise ValueError(f"inputs must be 2-D or 3-D, got {inputs.ndim}-D inputs of shape {inputs.shape}")
    weights = torch.einsum("...id,...jd->...ij", inputs, inputs).softmax(dim=-1)
    return weights, torch.einsum("...ij,...jd->...id", weights, inputs)


def _ssa_alt_loops(inputs):
    # One sequence at a time; a 2-D input is a batch of one.
    if len(inputs.shape) < 2:
        raise ValueError(f"inputs of shape {list(inputs.shape)} has no token axis")
    batch = inputs if inputs.dim() == 3 else inputs.unsqueeze(0)
    ws, cs = [], []
    for x in batch:
        w = torch.softmax(torch.mm(x, x.t()), dim=1)
        ws.append(w)
        cs.append(torch.mm(w, x))
    w, c = torch.stack(ws), torch.stack(cs)
    return (w, c) if inputs.dim() == 3 else (w[0], c[0])


def _ssa_alt_float64(inputs):
    # The softmax by hand (exp of max-shifted scores over their sum), in float64.
    if inputs.dim() < 2:
        raise ValueError("inputs needs shape (num_tokens, d_in) or (batch, num_tokens, d_in), "
                         "got " + "x".join(map(str, inputs.shape)))
    x = inputs.double()
    scores = x @ x.mT
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    weights = e / e.sum(dim=-1, keepdim=True)
    return weights.to(inputs.dtype), (weights @ x).to(inputs.dtype)


register(Exercise(
    label="ch04_ex2", title="All queries at once",
    name="simple_self_attention", reference=simple_self_attention, points=2,
    checks=[
        Check("the chapter's sentence (6 tokens of width 3)", _ssa_sentence_calls, seed=0,
              hint="return a tuple (weights, contexts): weights (num_tokens, num_tokens) with rows summing "
                   "to 1, contexts = weights times inputs."),
        Check("a batch of 2 sequences of 5 tokens of width 4", _ssa_batch_calls, seed=0,
              hint="this check passes a batch of shape (2, 5, 4): each sequence of the batch must get the "
                   "weights and contexts it would get alone, as a 2-D input."),
        Check("1-D inputs raise ValueError naming inputs and its shape", _ssa_bad_calls, seed=0,
              must_mention=lambda call: ["inputs", tuple(call.args[0].shape)], weight=0.5,
              hint="check inputs.dim() first and name inputs (and its shape) in the message."),
        Check("a float64 batch of 3 x 9 tokens of width 6, and 7 tokens of width 3 (hidden)",
              _ssa_big_calls, seed=3, public=False,
              hint="this check uses a float64 batch and a 2-D float32 input: weights and contexts keep the "
                   "dtype of inputs, and each sequence gets what it would get alone."),
    ],
    mistakes=[
        Mistake("softmax over the queries axis",
                "your weights are normalised over the wrong axis: each row (one query) must sum to 1 "
                "over the keys, i.e. the softmax runs along the last axis.", _ssa_query_axis),
        Mistake("scaled by sqrt(d_in)",
                "you divided the scores by sqrt(d_in); the simple self-attention of this section uses the "
                "raw dot products.", _ssa_scaled),
        Mistake("transposed the first two axes",
                "for a batch, swap only the last two axes (tokens and features) of the keys; the batch "
                "axis must stay in front.", _ssa_first_axes),
        Mistake("inputs.T on a batch",
                "on a batch (a 3-D tensor), .T reverses all three axes instead of swapping the last two "
                "(the token and feature axes); swap only those two, so that the same code serves one "
                "sequence and a batch.", _ssa_dot_T),
    ],
    alternatives=[
        Alternative("einsum", "einsum over '...' batch axes, Tensor.softmax", _ssa_alt_einsum),
        Alternative("loops over the batch", "torch.mm per sequence, torch.stack", _ssa_alt_loops),
        Alternative("float64 by hand", "softmax written out (max-shifted exp), float64, cast back",
                    _ssa_alt_float64),
    ],
))


# ======================================================================= ch04_ex3

class SelfAttention(nn.Module):
    """Scaled dot-product self-attention with trainable query, key and value projections."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(-2, -1)
        weights = torch.softmax(scores / math.sqrt(keys.shape[-1]), dim=-1)
        return weights @ values


class _SAUnscaled(SelfAttention):
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(queries @ keys.transpose(-2, -1), dim=-1) @ values


class _SAScaledByDk(SelfAttention):
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(-2, -1) / keys.shape[-1]
        return torch.softmax(scores, dim=-1) @ values


class _SAInputsAsValues(SelfAttention):
    def forward(self, x):
        queries, keys = self.W_query(x), self.W_key(x)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1])
        return torch.softmax(scores, dim=-1) @ x


class _SAQueryAxis(SelfAttention):
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1])
        return torch.softmax(scores, dim=-2) @ values


class _SAIgnoresBias(SelfAttention):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__(d_in, d_out, qkv_bias=False)


class _SAKeysT(SelfAttention):
    # LLMs-from-scratch's SelfAttention_v2 verbatim in spirit: keys.T, right for 2-D inputs only.
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.T
        return torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1) @ values


class _SAScaledByDin(SelfAttention):
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(x.shape[-1])
        return torch.softmax(scores, dim=-1) @ values


class _SAKeysTimesQueries(SelfAttention):
    # K Q^T instead of Q K^T: row i holds key i against every query.
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = keys @ queries.transpose(-2, -1) / math.sqrt(keys.shape[-1])
        return torch.softmax(scores, dim=-1) @ values


class _SAAltRaschka(nn.Module):
    """LLMs-from-scratch's layout: layers created value, key, query; keys.T for one sequence and
    keys.transpose(1, 2) for a batch (as in its CausalAttention); scaled by d_k ** 0.5."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
        attn_scores = queries @ (keys.T if x.dim() == 2 else keys.transpose(1, 2))
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        return attn_weights @ values


class _SAAltEinsum64(nn.Module):
    """The layers' weights used by einsum in float64, cast back."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query, self.W_key, self.W_value = (nn.Linear(d_in, d_out, bias=qkv_bias) for _ in range(3))

    def _project(self, layer, x):
        y = torch.einsum("...i,oi->...o", x, layer.weight.double())
        return y + layer.bias.double() if layer.bias is not None else y

    def forward(self, x):
        x64 = x.double()
        q, k, v = (self._project(m, x64) for m in (self.W_query, self.W_key, self.W_value))
        weights = torch.softmax(torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(k.shape[-1]), dim=-1)
        return torch.einsum("...ij,...jd->...id", weights, v).to(x.dtype)


class _SAAltSDPA(nn.Module):
    """torch's fused scaled_dot_product_attention on the three projections."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        return F.scaled_dot_product_attention(self.W_query(x), self.W_key(x), self.W_value(x))


def _sa_state(g, d_in, d_out, bias):
    state = {}
    for name in ("W_query", "W_key", "W_value"):
        state[f"{name}.weight"] = torch.randn(d_out, d_in, generator=g) / math.sqrt(d_in)
        if bias:
            state[f"{name}.bias"] = 0.3 * torch.randn(d_out, generator=g)
    return state


def _sa_call(g, d_in, d_out, bias, x):
    return Call(init_args=(d_in, d_out), init_kwargs={"qkv_bias": bias}, init_seed=0,
                state_dict=_sa_state(g, d_in, d_out, bias), args=(x,), report=("param_shapes",))


def _sa_sentence_calls(seed):
    return [_sa_call(_gen(seed), 3, 2, False, INPUTS.clone())]


def _sa_batch_calls(seed):
    g = _gen(seed)
    return [_sa_call(g, 5, 3, False, torch.randn(2, 4, 5, generator=g))]


def _sa_bias_calls(seed):
    g = _gen(seed)
    return [_sa_call(g, 3, 4, True, torch.randn(6, 3, generator=g))]


def _sa_big_calls(seed):
    g = _gen(seed)
    return [_sa_call(g, 6, 4, True, torch.randn(3, 7, 6, generator=g)),
            _sa_call(g, 4, 8, False, torch.randn(5, 4, generator=g))]


register(Exercise(
    label="ch04_ex3", title="A self-attention module",
    name="SelfAttention", reference=SelfAttention, points=3, kind="class",
    checks=[
        Check("d_in=3, d_out=2 on the chapter's sentence, with given weights", _sa_sentence_calls, seed=4,
              hint="this check loads given weights into W_query, W_key and W_value (d_in=3, d_out=2) and "
                   "compares the output on the chapter's sentence with the contract's: scores = queries "
                   "times keys transposed, divided by sqrt(d_k) with d_k = d_out the width of the keys; "
                   "softmax over the keys; weights times values."),
        Check("a batch of 2 x 4 tokens, d_in=5, d_out=3, with given weights", _sa_batch_calls, seed=5,
              hint="this check runs a batch (x of shape (2, 4, 5)) with given weights, d_in=5, d_out=3: "
                   "each sequence of the batch must get the output it would get alone, as a 2-D x."),
        Check("qkv_bias=True gives each projection a bias", _sa_bias_calls, seed=6,
              hint="this check builds the module with qkv_bias=True (d_in=3, d_out=4), loads given weights "
                   "and biases by name, and compares the output and the parameters' names and shapes; the "
                   "reason above says which of them differs."),
        Check("batches with and without bias, other sizes (hidden)", _sa_big_calls, seed=7, public=False,
              hint="this check compares outputs and parameters for a batch and a single sequence, with and "
                   "without bias, for other sizes (d_out larger and smaller than d_in)."),
    ],
    mistakes=[
        Mistake("no scaling",
                "you forgot to scale the scores: divide them by sqrt(d_k), the width of the keys, before "
                "the softmax.", _SAUnscaled),
        Mistake("scaled by d_k",
                "you divided the scores by d_k itself; the scaling factor is its square root.", _SAScaledByDk),
        Mistake("inputs as values",
                "you weighted the raw inputs; the context vectors are weighted sums of the projected "
                "values (the output of W_value).", _SAInputsAsValues),
        Mistake("softmax over the queries axis",
                "your softmax normalises over the queries axis; each query's weights must sum to 1 over "
                "the keys (the last axis).", _SAQueryAxis),
        Mistake("ignored qkv_bias",
                "your projections have no bias even when qkv_bias=True; pass the flag on to nn.Linear.",
                _SAIgnoresBias),
        Mistake("keys.T on a batch",
                "on a batch (a 3-D tensor), keys.T reverses all three axes instead of swapping the last "
                "two (the token and feature axes); swap only those two, so that the same code serves one "
                "sequence and a batch.",
                _SAKeysT),
        Mistake("scaled by sqrt(d_in)",
                "you divided the scores by the square root of d_in, the width of the inputs; the scale "
                "is sqrt(d_k), the width of the keys (d_out).", _SAScaledByDin),
        Mistake("keys times queries",
                "your scores are keys times queries transposed: row i holds key i against every query, so "
                "each row of weights is normalised over the queries. The scores have one row per query: "
                "queries times keys transposed.", _SAKeysTimesQueries),
    ],
    alternatives=[
        Alternative("LLMs-from-scratch's layout", "layers created value, key, query; keys.T or "
                    "keys.transpose(1, 2); scaled by d_k ** 0.5", _SAAltRaschka),
        Alternative("einsum on the weights, float64", "layer weights and biases used by einsum in float64, "
                    "cast back", _SAAltEinsum64),
        Alternative("torch's fused SDPA", "F.scaled_dot_product_attention on the projections", _SAAltSDPA),
    ],
))


# ======================================================================= ch04_ex4

def attend_permuted(inputs, perm, W_query, W_key, W_value):
    """Attention on ``inputs[perm]``, and its output put back into the original order."""
    num_tokens = inputs.shape[0]
    if perm.dim() != 1 or perm.numel() != num_tokens or \
            not torch.equal(torch.sort(perm).values, torch.arange(num_tokens, dtype=perm.dtype)):
        raise ValueError(f"perm must contain each of 0..{num_tokens - 1} exactly once (inputs has "
                         f"{num_tokens} tokens), got perm of shape {tuple(perm.shape)}: {perm.tolist()}")
    x = inputs[perm]
    queries, keys, values = x @ W_query, x @ W_key, x @ W_value
    weights = torch.softmax(queries @ keys.T / math.sqrt(keys.shape[-1]), dim=-1)
    permuted = weights @ values
    inverse = torch.argsort(perm)
    return permuted, permuted[inverse]


def _ap_check(inputs, perm):
    n = inputs.shape[0]
    if perm.dim() != 1 or sorted(perm.tolist()) != list(range(n)):
        raise ValueError(f"perm is not a permutation: {perm.tolist()}")


def _ap_attend(x, W_query, W_key, W_value, scale=True):
    queries, keys, values = x @ W_query, x @ W_key, x @ W_value
    scores = queries @ keys.T
    if scale:
        scores = scores / math.sqrt(keys.shape[-1])
    return torch.softmax(scores, dim=-1) @ values


def _ap_reapplied(inputs, perm, W_query, W_key, W_value):
    _ap_check(inputs, perm)
    permuted = _ap_attend(inputs[perm], W_query, W_key, W_value)
    return permuted, permuted[perm]


def _ap_no_validation(inputs, perm, W_query, W_key, W_value):
    permuted = _ap_attend(inputs[perm], W_query, W_key, W_value)
    return permuted, permuted[torch.argsort(perm, stable=True)]


def _ap_unscaled(inputs, perm, W_query, W_key, W_value):
    _ap_check(inputs, perm)
    permuted = _ap_attend(inputs[perm], W_query, W_key, W_value, scale=False)
    return permuted, permuted[torch.argsort(perm)]


def _ap_alt_scatter(inputs, perm, W_query, W_key, W_value):
    # Restore by assignment: row r of the shuffled run belongs to token perm[r].
    n = inputs.shape[0]
    if perm.ndim != 1 or len(perm) != n or perm.min() < 0 or perm.max() >= n or \
            torch.bincount(perm, minlength=n).max() != 1:
        raise ValueError(f"perm {perm.tolist()} is not a permutation of 0..{n - 1}")
    x = inputs.index_select(0, perm)
    q, k, v = x @ W_query, x @ W_key, x @ W_value
    permuted = torch.softmax(q @ k.transpose(0, 1) / k.size(-1) ** 0.5, dim=1) @ v
    restored = torch.empty_like(permuted)
    restored[perm] = permuted
    return permuted, restored


def _ap_alt_loops(inputs, perm, W_query, W_key, W_value):
    # The inverse permutation built by a loop; einsum for the attention.
    n = inputs.shape[0]
    order = perm.tolist() if perm.dim() == 1 else None
    if order is None or sorted(order) != list(range(n)):
        raise ValueError(f"perm must hold each token index exactly once, got perm={perm.tolist()}")
    inverse = [0] * n
    for r, t in enumerate(order):
        inverse[t] = r
    x = inputs[order]
    q, k, v = (torch.einsum("td,de->te", x, W) for W in (W_query, W_key, W_value))
    weights = torch.einsum("ie,je->ij", q, k).div(math.sqrt(W_key.shape[1])).softmax(-1)
    permuted = torch.einsum("ij,je->ie", weights, v)
    return permuted, permuted[inverse]


def _ap_alt_equivariance(inputs, perm, W_query, W_key, W_value):
    # Uses the property itself, in float64: the restored run is attention on the unshuffled tokens.
    n = inputs.shape[0]
    if perm.dim() != 1 or set(perm.tolist()) != set(range(n)) or perm.numel() != n:
        raise ValueError("perm must be a permutation of the token positions")

    def attend(x):
        q, k, v = x @ W_query.double(), x @ W_key.double(), x @ W_value.double()
        return torch.softmax(q @ k.T / math.sqrt(k.shape[1]), dim=-1) @ v

    restored = attend(inputs.double())
    return attend(inputs.double()[perm]).to(inputs.dtype), restored.to(inputs.dtype)


def _random_perm(n, g):
    # Never an involution: for those, a permutation and its inverse coincide.
    while True:
        perm = torch.randperm(n, generator=g)
        if not torch.equal(perm[perm], torch.arange(n)):
            return perm


def _projections(g, d_in, d_out):
    return tuple(torch.randn(d_in, d_out, generator=g) for _ in range(3))


def _ap_sentence_calls(seed):
    g = _gen(seed)
    w = _projections(g, 3, 2)
    swap = torch.tensor([2, 1, 0, 3, 4, 5])      # "mice hunt owls on quiet nights"
    shift = torch.tensor([1, 2, 3, 4, 5, 0])     # a cyclic shift (not its own inverse)
    return [Call(args=(INPUTS.clone(), swap) + w), Call(args=(INPUTS.clone(), shift) + w)]


def _ap_random_calls(seed):
    g = _gen(seed)
    x = torch.randn(8, 4, generator=g)
    return [Call(args=(x, _random_perm(8, g)) + _projections(g, 4, 3))]


def _ap_bad_calls(seed):
    g = _gen(seed)
    w = _projections(g, 3, 2)
    return [Call(args=(INPUTS.clone(), torch.tensor([0, 0, 1, 2, 3, 4])) + w),   # a repeated index
            Call(args=(INPUTS.clone(), torch.tensor([1, 0, 2, 3, 4])) + w),      # too short
            Call(args=(INPUTS.clone(), torch.tensor([1, 2, 3, 4, 5, 6])) + w)]   # out of range


def _ap_big_calls(seed):
    g = _gen(seed)
    x = torch.randn(10, 5, generator=g)
    return [Call(args=(x, _random_perm(10, g)) + _projections(g, 5, 6))]


register(Exercise(
    label="ch04_ex4", title="Shuffle, attend, restore",
    name="attend_permuted", reference=attend_permuted, points=2,
    checks=[
        Check("the chapter's sentence, owls and mice swapped, then cyclically shifted",
              _ap_sentence_calls, seed=8,
              hint="this check swaps owls and mice, then shifts the sentence cyclically, and compares both "
                   "returned tensors: the first is scaled attention (sqrt(d_k)) over inputs[perm]; in the "
                   "second, row t is the context of original token t."),
        Check("8 random tokens, a random permutation", _ap_random_calls, seed=9,
              hint="restored_contexts[t] must be the context of original token t, which sits at the "
                   "position where perm holds t."),
        Check("a perm that is not a permutation of 0..num_tokens-1 raises ValueError naming perm",
              _ap_bad_calls, seed=10, must_mention=["perm"], weight=0.5,
              hint="check that perm is 1-D and holds each index 0..num_tokens-1 exactly once; name perm "
                   "in the message."),
        Check("10 random tokens, a random permutation (hidden)", _ap_big_calls, seed=11, public=False,
              hint="this check compares both returned tensors for 10 random tokens and a random "
                   "permutation."),
    ],
    mistakes=[
        Mistake("reapplied perm",
                "you shuffled the output with perm a second time; to undo a permutation you need its "
                "inverse (they only coincide when perm is its own inverse, like a single swap).",
                _ap_reapplied),
        Mistake("no validation of perm",
                "a repeated, missing or out-of-range index in perm must be refused with a ValueError "
                "naming perm, before any indexing.", _ap_no_validation),
        Mistake("no scaling",
                "you forgot to divide the scores by sqrt(d_k) (the number of columns of W_key) before "
                "the softmax.", _ap_unscaled),
    ],
    alternatives=[
        Alternative("restored by assignment", "index_select, bincount validation, restored[perm] = permuted",
                    _ap_alt_scatter),
        Alternative("inverse by a loop, einsum", "inverse permutation built in Python, einsum attention",
                    _ap_alt_loops),
        Alternative("equivariance in float64", "restored = attention on the unshuffled tokens, float64",
                    _ap_alt_equivariance),
    ],
))


# ======================================================================= ch04_ex5

def sinusoidal_encoding(num_positions, d_model):
    """Sinusoidal positional encoding, float32 tensor of shape (num_positions, d_model)."""
    if num_positions < 1:
        raise ValueError(f"num_positions must be a positive integer, got {num_positions}")
    if d_model < 2 or d_model % 2 != 0:
        raise ValueError(f"d_model must be a positive even integer (sin/cos pairs), got {d_model}")
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angles = pos / 10000.0 ** (two_i / d_model)
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()


def _pe_validate(num_positions, d_model):
    if num_positions < 1:
        raise ValueError(f"num_positions must be positive, got {num_positions}")
    if d_model < 2 or d_model % 2 != 0:
        raise ValueError(f"d_model must be positive and even, got {d_model}")


def _pe_table(num_positions, d_model, exponent, swap=False, blocks=False):
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    cols = torch.arange(d_model, dtype=torch.float64)
    angles = pos / 10000.0 ** exponent(cols)
    if blocks:  # first all the sines, then all the cosines
        half = angles[:, 0::2]
        return torch.cat([torch.sin(half), torch.cos(half)], dim=1)[:, :d_model].float()
    even = (torch.arange(d_model) % 2 == 0)
    if swap:
        even = ~even
    return torch.where(even, torch.sin(angles), torch.cos(angles)).float()


def _pe_swapped(num_positions, d_model):
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions, d_model, lambda c: 2 * (c // 2) / d_model, swap=True)


def _pe_no_factor_two(num_positions, d_model):
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions, d_model, lambda c: (c // 2) / d_model)


def _pe_column_index(num_positions, d_model):
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions, d_model, lambda c: c / d_model)


def _pe_blocks(num_positions, d_model):
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions, d_model, lambda c: 2 * (c // 2) / d_model, blocks=True)


def _pe_odd_accepted(num_positions, d_model):
    if num_positions < 1 or d_model < 1:
        raise ValueError(f"num_positions and d_model must be positive, got {num_positions}, {d_model}")
    return _pe_table(num_positions, d_model, lambda c: 2 * (c // 2) / d_model)


def _pe_from_one(num_positions, d_model):
    # Positions counted 1..num_positions instead of 0..num_positions-1.
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions + 1, d_model, lambda c: 2 * (c // 2) / d_model)[1:]


def _pe_float64(num_positions, d_model):
    # The right table, left in float64.
    _pe_validate(num_positions, d_model)
    return _pe_table(num_positions, d_model, lambda c: 2 * (c // 2) / d_model).double()


def _pe_alt_d2l(num_positions, d_model):
    # d2l's PositionalEncoding table: positions over a power of 10000, float32 throughout.
    if num_positions <= 0:
        raise ValueError(f"num_positions={num_positions} must be at least 1")
    if d_model <= 0 or d_model % 2:
        raise ValueError(f"d_model={d_model} must be even and positive")
    P = torch.zeros((num_positions, d_model))
    X = torch.arange(num_positions, dtype=torch.float32).reshape(-1, 1) / torch.pow(
        10000, torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    P[:, 0::2] = torch.sin(X)
    P[:, 1::2] = torch.cos(X)
    return P


def _pe_alt_exp_log(num_positions, d_model):
    # The Annotated Transformer's form: frequencies as exp(-2i log(10000) / d_model), stacked.
    if not num_positions >= 1:
        raise ValueError("num_positions must be >= 1")
    if not (d_model >= 2 and d_model % 2 == 0):
        raise ValueError("d_model must be an even number >= 2")
    position = torch.arange(0, num_positions).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
    angles = position * div_term
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).reshape(num_positions, d_model)


def _pe_alt_loops(num_positions, d_model):
    # Every entry with Python's math, one at a time.
    if num_positions < 1:
        raise ValueError(f"expected num_positions >= 1, got {num_positions}")
    if d_model < 1 or d_model % 2 == 1:
        raise ValueError(f"expected an even d_model >= 2, got {d_model}")
    rows = []
    for pos in range(num_positions):
        row = []
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            row += [math.sin(angle), math.cos(angle)]
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float32)


def _pe_d_model_first(num_positions, d_model):
    if d_model < 2 or d_model % 2 != 0:
        raise ValueError(f"d_model must be positive and even, got {d_model}")
    if num_positions < 1:
        raise ValueError(f"num_positions must be positive, got {num_positions}")
    return _pe_table(num_positions, d_model, lambda c: 2 * (c // 2) / d_model)


def _pe_small_calls(seed):
    return [Call(args=(4, 6))]


def _pe_table_calls(seed):
    return [Call(args=(50, 16))]


def _pe_bad_calls(seed):
    return [Call(args=(5, 3)), Call(args=(0, 4)), Call(args=(4, 0)), Call(args=(-2, 4)), Call(args=(6, 7)),
            Call(args=(0, 3)), Call(args=(-1, 0))]   # both wrong: num_positions is reported


def _pe_bad_words(call):
    return ["num_positions"] if call.args[0] < 1 else ["d_model"]


def _pe_random_calls(seed):
    g = _gen(seed)
    n = int(torch.randint(10, 41, (1,), generator=g))
    d = 2 * int(torch.randint(2, 17, (1,), generator=g))
    return [Call(args=(n, d)), Call(args=(1, 8))]


register(Exercise(
    label="ch04_ex5", title="Sinusoidal positional encoding",
    name="sinusoidal_encoding", reference=sinusoidal_encoding, points=2,
    checks=[
        Check("4 positions, d_model=6", _pe_small_calls, seed=0, atol=1e-4,
              hint="column 2i holds sin(pos / 10000^(2i/d_model)), column 2i+1 the cosine of the same angle; "
                   "return float32 of shape (num_positions, d_model)."),
        Check("50 positions, d_model=16", _pe_table_calls, seed=0, atol=1e-4,
              hint="this check compares the whole float32 table for 50 positions and d_model=16: row pos, "
                   "column 2i holds sin(pos / 10000^(2i/d_model)), column 2i+1 the cosine of the same "
                   "angle; the reason above gives the largest difference."),
        Check("odd or non-positive sizes raise ValueError naming the argument (num_positions when both "
              "are wrong)", _pe_bad_calls, seed=0, atol=1e-4, must_mention=_pe_bad_words, weight=0.5,
              hint="refuse num_positions < 1 and an odd or non-positive d_model, naming the offending "
                   "argument in the message."),
        Check("random sizes (hidden)", _pe_random_calls, seed=12, public=False, atol=1e-4,
              hint="this check compares float32 tables of random sizes, and a single position."),
    ],
    mistakes=[
        Mistake("sin and cos swapped",
                "your even columns hold cosines and your odd columns sines; Vaswani et al. put the sine "
                "in column 2i and the cosine in column 2i+1.", _pe_swapped),
        Mistake("exponent i/d_model",
                "your frequencies fall too slowly: the exponent of 10000 is 2i/d_model, where i counts "
                "the sin/cos pairs (so 2i is the even column index).", _pe_no_factor_two),
        Mistake("column index as exponent",
                "your cosine columns use their own column index in the exponent; both columns of a pair "
                "(2i and 2i+1) share the frequency of the even one, 1 / 10000^(2i/d_model).",
                _pe_column_index),
        Mistake("sines and cosines in blocks",
                "you put all the sines first and all the cosines after; the formula interleaves them "
                "(sin in even columns, cos in odd columns).", _pe_blocks),
        Mistake("odd d_model accepted",
                "an odd d_model leaves a sine without its cosine partner; refuse it with a ValueError "
                "naming d_model.", _pe_odd_accepted),
        Mistake("d_model checked first",
                "when both num_positions and d_model are wrong, the contract asks for the error about "
                "num_positions: test num_positions first.", _pe_d_model_first),
        Mistake("positions counted from 1",
                "your rows are positions 1 to num_positions; positions count from 0, so row 0 holds "
                "sin(0) = 0 in the even columns and cos(0) = 1 in the odd ones.", _pe_from_one),
        Mistake("float64 table",
                "your values are right but the table is float64; the contract asks for float32 (compute "
                "in float64 if you like, and convert the result).", _pe_float64),
    ],
    alternatives=[
        Alternative("d2l's table", "positions divided by torch.pow(10000, 2i/d_model), float32, slice "
                    "assignment", _pe_alt_d2l),
        Alternative("Annotated Transformer's frequencies", "exp(-2i log(10000)/d_model), sin and cos stacked "
                    "and reshaped", _pe_alt_exp_log),
        Alternative("Python loops", "math.sin and math.cos entry by entry", _pe_alt_loops),
    ],
))


# ======================================================================= ch04_ex6

_LINEAR_NAMES = ("W_query", "W_key", "W_value")


def linear_state_dict(W_query, W_key, W_value):
    """The (d_in, d_out) matrices of the nn.Parameter module as a state dict for the
    nn.Linear module of exercise 3 (qkv_bias=False): nn.Linear computes x @ weight.T and
    stores weight as (d_out, d_in), so each matrix goes in transposed."""
    return {f"{name}.weight": W.T.contiguous()
            for name, W in zip(_LINEAR_NAMES, (W_query, W_key, W_value))}


def _lsd_untransposed(W_query, W_key, W_value):
    return {f"{name}.weight": W.clone() for name, W in zip(_LINEAR_NAMES, (W_query, W_key, W_value))}


def _lsd_reshaped(W_query, W_key, W_value):
    return {f"{name}.weight": W.reshape(W.shape[1], W.shape[0])
            for name, W in zip(_LINEAR_NAMES, (W_query, W_key, W_value))}


def _lsd_bare_names(W_query, W_key, W_value):
    return {name: W.T.contiguous() for name, W in zip(_LINEAR_NAMES, (W_query, W_key, W_value))}


def _lsd_query_key_swapped(W_query, W_key, W_value):
    return {"W_query.weight": W_key.T.contiguous(), "W_key.weight": W_query.T.contiguous(),
            "W_value.weight": W_value.T.contiguous()}


def _lsd_with_biases(W_query, W_key, W_value):
    out = linear_state_dict(W_query, W_key, W_value)
    for name, W in zip(_LINEAR_NAMES, (W_query, W_key, W_value)):
        out[f"{name}.bias"] = torch.zeros(W.shape[1], dtype=W.dtype)
    return out


class _LsdLayers(nn.Module):
    def __init__(self, d_in, d_out, dtype):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=False, dtype=dtype)
        self.W_key = nn.Linear(d_in, d_out, bias=False, dtype=dtype)
        self.W_value = nn.Linear(d_in, d_out, bias=False, dtype=dtype)


def _lsd_alt_copy(W_query, W_key, W_value):
    """Build the nn.Linear layers, copy the transposed matrices in under no_grad, and
    return the module's own state_dict as a plain dict."""
    d_in, d_out = W_query.shape
    layers = _LsdLayers(d_in, d_out, W_query.dtype)
    with torch.no_grad():
        layers.W_query.weight.copy_(W_query.t())
        layers.W_key.weight.copy_(W_key.t())
        layers.W_value.weight.copy_(W_value.t())
    return dict(layers.state_dict())


def _lsd_alt_parameter(W_query, W_key, W_value):
    """One nn.Linear per matrix, its weight replaced by a new nn.Parameter, keys prefixed."""
    out = {}
    for prefix, W in (("W_query", W_query), ("W_key", W_key), ("W_value", W_value)):
        layer = nn.Linear(W.shape[0], W.shape[1], bias=False)
        layer.weight = nn.Parameter(torch.transpose(W, 0, 1).clone())
        for key, value in layer.state_dict().items():
            out[prefix + "." + key] = value
    return out


def _lsd_alt_identity(W_query, W_key, W_value):
    """Read each weight off nn.Linear's definition: F.linear(x, A) = x @ A.T, so A is what
    x @ W gives for x = the identity, transposed (einsum)."""
    eye = torch.eye(W_query.shape[0], dtype=W_query.dtype)
    return {"W_query.weight": torch.einsum("ij->ji", eye @ W_query),
            "W_key.weight": torch.einsum("ij->ji", eye @ W_key),
            "W_value.weight": torch.einsum("ij->ji", eye @ W_value)}


def _lsd_chapter_calls(seed):
    # The chapter's own matrices: the same generator and order as its cell.
    gen = torch.Generator().manual_seed(2024)
    mats = tuple(torch.randn(3, 2, generator=gen) for _ in range(3))
    return [Call(args=mats)]


def _lsd_other_calls(seed):
    g = _gen(seed)
    return [Call(args=tuple(torch.randn(5, 4, generator=g, dtype=torch.float64) for _ in range(3)))]


def _lsd_random_calls(seed):
    g = _gen(seed)
    d_in, d_out = int(torch.randint(2, 9, (1,), generator=g)), int(torch.randint(2, 9, (1,), generator=g))
    square = int(torch.randint(2, 7, (1,), generator=g))
    return [Call(args=tuple(torch.randn(d_in, d_out, generator=g) for _ in range(3))),
            Call(args=tuple(torch.randn(square, square, generator=g) for _ in range(3)))]


register(Exercise(
    label="ch04_ex6", title="From nn.Parameter matrices to nn.Linear weights",
    name="linear_state_dict", reference=linear_state_dict, points=1,
    checks=[
        Check("the chapter's W_q, W_k, W_v (d_in=3, d_out=2)", _lsd_chapter_calls, seed=0,
              hint="this check compares your dict (its keys, and each tensor's shape, dtype and values) "
                   "with what SelfAttention(3, 2) must load so that its layers compute x @ W_q, x @ W_k "
                   "and x @ W_v; the reason above names the first entry that differs."),
        Check("float64 matrices with d_in=5, d_out=4", _lsd_other_calls, seed=1,
              hint="this check uses float64 matrices with d_in=5, d_out=4: the dict must hold what "
                   "SelfAttention(5, 4) loads to compute the same products, in float64; the reason above "
                   "names the first entry that differs."),
        Check("random sizes, one of them square (hidden)", _lsd_random_calls, public=False,
              hint="this check compares the dict for random sizes, one of them with d_in == d_out."),
    ],
    mistakes=[
        Mistake("not transposed",
                "your weights have the matrices' own shape (d_in, d_out); nn.Linear(d_in, d_out) stores "
                "its weight as (d_out, d_in) and computes x @ weight.T, so each matrix goes in transposed.",
                _lsd_untransposed),
        Mistake("reshaped instead of transposed",
                "your weights have the right shape but the wrong values: a reshape to (d_out, d_in) "
                "reorders the numbers row by row; a transpose swaps rows and columns.", _lsd_reshaped),
        Mistake("names without .weight",
                "the keys of a state dict name the parameter inside each layer: 'W_query.weight', not "
                "'W_query'.", _lsd_bare_names),
        Mistake("zero biases added",
                "exercise 3's module with qkv_bias=False has no bias parameters, so load_state_dict "
                "refuses 'W_query.bias' and friends; return the three weights only.", _lsd_with_biases),
        Mistake("query and key swapped",
                "'W_query.weight' holds W_key and 'W_key.weight' holds W_query: each matrix belongs to the "
                "layer of the same name.", _lsd_query_key_swapped),
    ],
    alternatives=[
        Alternative("copy_ into real layers", "nn.Linear layers in a module, copy_ under no_grad, "
                    "dict(module.state_dict())", _lsd_alt_copy),
        Alternative("weight replaced by a new Parameter", "per-layer nn.Parameter assignment, "
                    "torch.transpose, keys prefixed from each layer's state_dict", _lsd_alt_parameter),
        Alternative("read off F.linear's definition", "the identity pushed through x @ W, transposed "
                    "with einsum", _lsd_alt_identity),
    ],
))


# ======================================================================= ch04_ex7

def offset_matrix(k, d_model):
    """M_k, float32 (d_model, d_model): M_k @ PE[pos] == PE[pos + k] for every pos."""
    if d_model < 2 or d_model % 2 != 0:
        raise ValueError(f"d_model must be a positive even integer (sin/cos pairs), got {d_model}")
    pairs = torch.arange(d_model // 2, dtype=torch.float64)
    omega = 10000.0 ** (-2 * pairs / d_model)
    c, s = torch.cos(omega * k), torch.sin(omega * k)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = 2 * torch.arange(d_model // 2)
    M[even, even], M[even, even + 1] = c, s
    M[even + 1, even], M[even + 1, even + 1] = -s, c
    return M.float()


def _om_validate(d_model):
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model={d_model} must be even and positive")


def _om_blocks(k, d_model, freq_exponent, sign=1.0, angle_of=lambda w, k: w * k, half=False):
    n = d_model // 2
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(n):
        w = 10000.0 ** (-freq_exponent(i, d_model))
        a = angle_of(w, k)
        c, s = math.cos(a), sign * math.sin(a)
        r0, r1 = (i, i + n) if half else (2 * i, 2 * i + 1)
        M[r0, r0], M[r0, r1], M[r1, r0], M[r1, r1] = c, s, -s, c
    return M.float()


def _om_transposed(k, d_model):
    _om_validate(d_model)
    return _om_blocks(k, d_model, lambda i, d: 2 * i / d, sign=-1.0)


def _om_exponent_i(k, d_model):
    _om_validate(d_model)
    return _om_blocks(k, d_model, lambda i, d: i / d)


def _om_rotate_half(k, d_model):
    _om_validate(d_model)
    return _om_blocks(k, d_model, lambda i, d: 2 * i / d, half=True)


def _om_angle_without_k(k, d_model):
    _om_validate(d_model)
    return _om_blocks(k, d_model, lambda i, d: 2 * i / d, angle_of=lambda w, k: w)


def _om_odd_accepted(k, d_model):
    if d_model < 1:
        raise ValueError(f"d_model must be positive, got {d_model}")
    M = torch.eye(d_model)
    M[:d_model - d_model % 2, :d_model - d_model % 2] = _om_blocks(k, d_model - d_model % 2,
                                                                     lambda i, d: 2 * i / d)
    return M


def _om_alt_loops(k, d_model):
    """Python loops and math.cos / math.sin, one 2x2 block at a time."""
    if d_model <= 0 or d_model % 2 == 1:
        raise ValueError(f"expected an even, positive d_model, got d_model = {d_model}")
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        angle = k / 10000 ** (2 * i / d_model)
        block = torch.tensor([[math.cos(angle), math.sin(angle)],
                              [-math.sin(angle), math.cos(angle)]])
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = block
    return M


def _om_alt_block_diag(k, d_model):
    """torch.block_diag of 2x2 rotations built from float32 angles."""
    if not (isinstance(d_model, int) and d_model > 0 and d_model % 2 == 0):
        raise ValueError("d_model has to be a positive even number, not " + str(d_model))
    freqs = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    angles = freqs * k
    blocks = [torch.stack([torch.stack([a.cos(), a.sin()]), torch.stack([-a.sin(), a.cos()])])
              for a in angles]
    return torch.block_diag(*blocks)


def _om_alt_power(k, d_model):
    """M_1 to the power k in float64 (negative powers invert it): k steps of one."""
    if d_model % 2 or d_model < 2:
        raise ValueError(f"offset_matrix needs an even d_model >= 2; d_model={d_model}")
    one = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(0, d_model, 2):
        w = 1.0 / 10000 ** (i / d_model)
        one[i:i + 2, i:i + 2] = torch.tensor([[math.cos(w), math.sin(w)], [-math.sin(w), math.cos(w)]],
                                             dtype=torch.float64)
    return torch.linalg.matrix_power(one, k).to(torch.float32)


def _om_chapter_calls(seed):
    return [Call(args=(5, 32))]


def _om_negative_calls(seed):
    return [Call(args=(-3, 8)), Call(args=(0, 8)), Call(args=(1, 2))]


def _om_long_calls(seed):
    return [Call(args=(40, 64))]


def _om_bad_calls(seed):
    return [Call(args=(5, 7)), Call(args=(1, 0)), Call(args=(2, -4))]


def _om_random_calls(seed):
    g = _gen(seed)
    k1, k2 = (int(torch.randint(-40, 41, (1,), generator=g)) for _ in range(2))
    d1, d2 = (2 * int(torch.randint(1, 25, (1,), generator=g)) for _ in range(2))
    return [Call(args=(k1, d1)), Call(args=(k2, d2))]


register(Exercise(
    label="ch04_ex7", title="The offset matrix M_k",
    name="offset_matrix", reference=offset_matrix, points=2,
    checks=[
        Check("k=5, d_model=32 (the chapter's table)", _om_chapter_calls, seed=0, atol=1e-5,
              hint="this check compares the whole (32, 32) matrix for k=5: M_k @ PE[pos] must equal "
                   "PE[pos + k] for every position, the pair of columns 2i (sin) and 2i+1 (cos) turned by "
                   "its own angle k / 10000^(2i/d_model)."),
        Check("a negative offset, a zero offset, one pair: (k, d_model) = (-3, 8), (0, 8), (1, 2)",
              _om_negative_calls, seed=0, atol=1e-5,
              hint="this check covers k < 0 (M_k @ PE[pos] = PE[pos + k] turns back), k = 0 (M_0 is the "
                   "identity) and d_model = 2 (one pair)."),
        Check("a long offset in a wide table: k=40, d_model=64", _om_long_calls, seed=0, atol=1e-5,
              hint="this check compares the (64, 64) matrix for k=40: M_k @ PE[pos] must equal PE[pos + k] "
                   "there too."),
        Check("an odd or non-positive d_model raises ValueError naming d_model", _om_bad_calls, seed=0,
              must_mention=["d_model"], weight=0.5,
              hint="refuse a d_model that is not a positive even number, and name d_model in the message."),
        Check("random offsets and widths (hidden)", _om_random_calls, public=False, atol=1e-5,
              hint="block i turns by k / 10000^(2i/d_model), for any k and any even d_model."),
    ],
    mistakes=[
        Mistake("blocks turn the wrong way",
                "your matrix maps PE[pos] to PE[pos - k]: the sine terms have the wrong signs. With a pair "
                "ordered (sin, cos), sin(a + b) = sin a cos b + cos a sin b fixes the first row.",
                _om_transposed),
        Mistake("exponent i/d_model",
                "your frequencies fall too slowly: pair i turns by 1 / 10000^(2i/d_model) per position.",
                _om_exponent_i),
        Mistake("rotate-half layout",
                "you paired column i with column i + d_model/2 (the layout some rotary-embedding code "
                "uses); the sinusoidal table pairs column 2i (sin) with column 2i+1 (cos).",
                _om_rotate_half),
        Mistake("angle without k",
                "every block turns by the same angle whatever k is; the angle of pair i is its frequency "
                "times k (so that k = 0 gives the identity).", _om_angle_without_k),
        Mistake("odd d_model accepted",
                "an odd d_model leaves a column without a partner; refuse it with a ValueError naming "
                "d_model.", _om_odd_accepted),
    ],
    alternatives=[
        Alternative("Python loops", "math.cos and math.sin, one 2x2 block assigned at a time",
                    _om_alt_loops),
        Alternative("torch.block_diag", "2x2 rotations from float32 exp-log frequencies, block_diag",
                    _om_alt_block_diag),
        Alternative("a matrix power", "M_1 built once in float64, torch.linalg.matrix_power(M_1, k)",
                    _om_alt_power),
    ],
))
