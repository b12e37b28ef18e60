r"""ch04_ex1: A self-attention module.

Write a class `SelfAttention(d_in, d_out, qkv_bias=False)`, a subclass of
`nn.Module`, with exactly three parameterised sub-modules, the `nn.Linear` layers
`W_query`, `W_key` and `W_value`, each mapping `d_in` to `d_out` features, with a bias
if and only if `qkv_bias` is true. (The checks load given weights into these layers by
name, so their names and shapes matter, not their initialisation.)

Its `forward(x)` takes `x` of shape `(num_tokens, d_in)` or
`(batch, num_tokens, d_in)` and returns the context vectors, of shape
`(..., num_tokens, d_out)`: scaled dot-product attention
$\operatorname{softmax}(Q K^\top / \sqrt{d_k})\, V$ with $Q$, $K$, $V$ the outputs of the
three layers and $d_k$ = `d_out`, the softmax over the keys. No input validation is
required beyond what `nn.Linear` does.

Once it passes, copy the chapter's `W_q`, `W_k` and `W_v` into an instance with
`load_state_dict` in a scratch cell, so that it computes what `CompactSelfAttention` printed
for the sentence. Which way round does each matrix go into its `nn.Linear` layer, and what
would go wrong, silently, if $d_\text{in} = d_\text{out}$ and you got it the wrong way round?
"""
from __future__ import annotations

import math

from torch import nn
from torch.nn import functional as F
import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen
from ._common import INPUTS

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


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


# Inputs of the public and hidden checks ---------------------------------------------------


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
    return [_sa_call(gen(seed), 3, 2, False, INPUTS.clone())]


def _sa_batch_calls(seed):
    g = gen(seed)
    return [_sa_call(g, 5, 3, False, torch.randn(2, 4, 5, generator=g))]


def _sa_bias_calls(seed):
    g = gen(seed)
    return [_sa_call(g, 3, 4, True, torch.randn(6, 3, generator=g))]


def _sa_big_calls(seed):
    g = gen(seed)
    return [_sa_call(g, 6, 4, True, torch.randn(3, 7, 6, generator=g)),
            _sa_call(g, 4, 8, False, torch.randn(5, 4, generator=g))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("no scaling",
               "you forgot to scale the scores: divide them by sqrt(d_k), the width of the keys, before "
               "the softmax.")
class _SAUnscaled(SelfAttention):
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(queries @ keys.transpose(-2, -1), dim=-1) @ values


@mistakes.keep("scaled by d_k",
               "you divided the scores by d_k itself; the scaling factor is its square root.")
class _SAScaledByDk(SelfAttention):
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(-2, -1) / keys.shape[-1]
        return torch.softmax(scores, dim=-1) @ values


@mistakes.keep("inputs as values",
               "you weighted the raw inputs; the context vectors are weighted sums of the projected "
               "values (the output of W_value).")
class _SAInputsAsValues(SelfAttention):
    def forward(self, x):
        queries, keys = self.W_query(x), self.W_key(x)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1])
        return torch.softmax(scores, dim=-1) @ x


@mistakes.keep("softmax over the queries axis",
               "your softmax normalises over the queries axis; each query's weights must sum to 1 over "
               "the keys (the last axis).")
class _SAQueryAxis(SelfAttention):
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1])
        return torch.softmax(scores, dim=-2) @ values


@mistakes.keep("ignored qkv_bias",
               "your projections have no bias even when qkv_bias=True; pass the flag on to nn.Linear.")
class _SAIgnoresBias(SelfAttention):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__(d_in, d_out, qkv_bias=False)


@mistakes.keep("keys.T on a batch",
               "on a batch (a 3-D tensor), keys.T reverses all three axes instead of swapping the last "
               "two (the token and feature axes); swap only those two, so that the same code serves one "
               "sequence and a batch.")
class _SAKeysT(SelfAttention):
    # LLMs-from-scratch's SelfAttention_v2 verbatim in spirit: keys.T, right for 2-D inputs only.
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.T
        return torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1) @ values


@mistakes.keep("scaled by sqrt(d_in)",
               "you divided the scores by the square root of d_in, the width of the inputs; the scale "
               "is sqrt(d_k), the width of the keys (d_out).")
class _SAScaledByDin(SelfAttention):
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(x.shape[-1])
        return torch.softmax(scores, dim=-1) @ values


@mistakes.keep("keys times queries",
               "your scores are keys times queries transposed: row i holds key i against every query, so "
               "each row of weights is normalised over the queries. The scores have one row per query: "
               "queries times keys transposed.")
class _SAKeysTimesQueries(SelfAttention):
    # K Q^T instead of Q K^T: row i holds key i against every query.
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = keys @ queries.transpose(-2, -1) / math.sqrt(keys.shape[-1])
        return torch.softmax(scores, dim=-1) @ values


@mistakes.keep("sum-normalised scores",
               "you divided the scores by their sum along each row; attention weights come from the "
               "softmax of the scaled scores (exponentiate, then normalise).")
class _SASumNormalised(SelfAttention):
    # Carried over from the retired simple self-attention warm-up.
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(-2, -1) / math.sqrt(keys.shape[-1])
        return (scores / scores.sum(dim=-1, keepdim=True)) @ values


@mistakes.keep("transposed the first two axes",
               "keys.transpose(0, 1) swaps tokens and features for one sequence, but on a batch "
               "(batch, num_tokens, d_out) it swaps the batch and token axes; swap only the last two "
               "axes, transpose(-2, -1), so that the same code serves one sequence and a batch.")
class _SAFirstAxes(SelfAttention):
    # Carried over from the retired simple self-attention warm-up.
    def forward(self, x):
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(0, 1) / math.sqrt(keys.shape[-1])
        return torch.softmax(scores, dim=-1) @ values


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("LLMs-from-scratch's layout",
                   "layers created value, key, query; keys.T or "
"keys.transpose(1, 2); scaled by d_k ** 0.5")
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


@alternatives.keep("einsum on the weights, float64",
                   "layer weights and biases used by einsum in float64, "
"cast back")
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


@alternatives.keep("torch's fused SDPA",
                   "F.scaled_dot_product_attention on the projections")
class _SAAltSDPA(nn.Module):
    """torch's fused scaled_dot_product_attention on the three projections."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        return F.scaled_dot_product_attention(self.W_query(x), self.W_key(x), self.W_value(x))


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch04_ex1", title="A self-attention module",
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
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
