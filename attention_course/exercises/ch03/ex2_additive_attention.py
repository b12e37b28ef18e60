r"""ch03_ex2: Additive attention as a module.

Write a class `AdditiveAttention(nn.Module)`.

- `__init__(self, query_size, key_size, num_hiddens)` creates exactly three bias-free
  `nn.Linear` layers, so the module's parameters are `W_q.weight` of shape
  `(num_hiddens, query_size)`, `W_k.weight` of shape `(num_hiddens, key_size)` and
  `w_v.weight` of shape `(1, num_hiddens)`, and nothing else.
- `forward(self, queries, keys, values, valid_lens=None)` takes queries
  `(batch, num_queries, query_size)`, keys `(batch, num_keys, key_size)`, values
  `(batch, num_keys, d_v)` and `valid_lens` as in Exercise 1. It scores every pair with
  $\mathbf{w}_v^\top\tanh(\mathbf{W}_q\mathbf{q}+\mathbf{W}_k\mathbf{k})$, masks with
  `attn.masked_softmax` (the package's finished version of Exercise 1, so that the checks
  of this exercise run on the course's masked softmax, whatever your answer to Exercise 1;
  a release that withholds the package's version runs your own `masked_softmax` when you
  call `attn.masked_softmax` in your own cells) and returns the tuple `(output, weights)`
  with shapes `(batch, num_queries, d_v)` and `(batch, num_queries, num_keys)`.
- `output` must be differentiable with respect to `queries` and `keys`: a hidden check
  compares the gradients of `output.sum()` with respect to them, so build it from them with
  torch operations (no `detach`, `torch.no_grad` or round trip through NumPy on the way).

The checks load given values into your parameters, so the order in which you create the
layers does not matter, but their names do.
"""
from __future__ import annotations

from torch import nn
import torch

from ... import functional as F_att
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, same_parameters
from .ex1_masked_softmax import _ms_finite_mask, _ms_queries_axis

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# Inputs of the public and hidden checks ---------------------------------------------------


def _add_params(seed):
    g = gen(seed)
    q, k, v = torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 2, generator=g)
    return [Call(init_args=(6, 4, 8), init_seed=seed, args=(q, k, v), report=("param_shapes",))]


def _add_state(g, query_size, key_size, num_hiddens):
    return {"W_q.weight": 0.5 * torch.randn(num_hiddens, query_size, generator=g),
            "W_k.weight": 0.5 * torch.randn(num_hiddens, key_size, generator=g),
            "w_v.weight": torch.randn(1, num_hiddens, generator=g)}


def _add_one_d(seed):
    g = gen(seed)
    state = _add_state(g, 6, 4, 8)
    q, k, v = torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 2, generator=g)
    return [Call(init_args=(6, 4, 8), init_seed=0, state_dict=state, args=(q, k, v, torch.tensor([4, 2])))]


def _add_two_d(seed):
    g = gen(seed)
    state = _add_state(g, 3, 5, 4)
    q, k, v = torch.randn(2, 2, 3, generator=g), torch.randn(2, 4, 5, generator=g), torch.randn(2, 4, 3, generator=g)
    return [Call(init_args=(3, 5, 4), init_seed=0, state_dict=state, args=(q, k, v),
                 kwargs={"valid_lens": torch.tensor([[0, 3], [4, 1]])})]


def _add_random(seed):
    g = gen(seed)
    batch, num_queries, num_keys = randint(g, 2, 4), randint(g, 2, 5), randint(g, 3, 7)
    query_size, key_size, num_hiddens, d_v = (randint(g, 2, 9) for _ in range(4))
    state = _add_state(g, query_size, key_size, num_hiddens)
    q = torch.randn(batch, num_queries, query_size, generator=g)
    k = torch.randn(batch, num_keys, key_size, generator=g)
    v = torch.randn(batch, num_keys, d_v, generator=g)
    lens = torch.randint(0, num_keys + 1, (batch, num_queries), generator=g)
    lens[0, 0] = 0
    init = (query_size, key_size, num_hiddens)
    return [Call(init_args=init, init_seed=1, state_dict=state, args=(q, k, v)),
            Call(init_args=init, init_seed=1, state_dict=state, args=(q, k, v, lens), grads_of=(0, 1))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("forgot tanh",
               "the summed features W_q q + W_k k reach w_v without the tanh nonlinearity.")
class _AddNoTanh(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1)
        weights = F_att.masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
        return weights @ values, weights


@mistakes.keep("tanh on each side",
               "you applied tanh to the projected queries and the projected keys separately and added "
               "the results; the score is w_v^T tanh(W_q q + W_k k), with tanh of the sum. (Separately, "
               "the query's part is the same for every key and the softmax ignores it.)")
class _AddTanhEachSide(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = torch.tanh(self.W_q(queries)).unsqueeze(2) + torch.tanh(self.W_k(keys)).unsqueeze(1)
        weights = F_att.masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
        return weights @ values, weights


@mistakes.keep("new axes of queries and keys swapped",
               "your scores have shape (batch, num_keys, num_queries), the keys along the rows: the projected "
               "queries got their new axis at position 1 and the projected keys at position 2, so their sum "
               "has shape (batch, num_keys, num_queries, num_hiddens). The contract's features are (batch, "
               "num_queries, num_keys, num_hiddens), one row per query: the queries take the new axis at "
               "position 2 (unsqueeze(2)) and the keys at position 1 (unsqueeze(1)).")
class _AddAxesSwapped(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = torch.tanh(self.W_q(queries).unsqueeze(1) + self.W_k(keys).unsqueeze(2))
        weights = F_att.masked_softmax(self.w_v(features).squeeze(-1), valid_lens)
        return weights @ values, weights


@mistakes.keep("softmax over the queries axis",
               "the weights are normalised over the queries axis; each query's weights must sum to 1 "
               "over the keys.")
class _AddQueriesAxis(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)
        weights = torch.softmax(scores, dim=1)
        if valid_lens is not None:
            weights = _ms_queries_axis(scores, valid_lens)
        return weights @ values, weights


@mistakes.keep("valid_lens ignored",
               "valid_lens is ignored: padded keys still get weight.")
class _AddNoMask(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        return super().forward(queries, keys, values, None)


@mistakes.keep("d2l's -1e6 masked softmax",
               "a query with no valid key got uniform weights over the padding (a masked softmax that "
               "fills with a finite -1e6, like d2l's); such a query must get zero weights, as "
               "attn.masked_softmax gives.")
class _AddD2lMask(F_att.AdditiveAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + self.W_k(keys).unsqueeze(1))
        weights = _ms_finite_mask(self.w_v(features).squeeze(-1), valid_lens)
        return weights @ values, weights


@mistakes.keep("layers with biases",
               "the module's parameters must be exactly W_q.weight, W_k.weight and w_v.weight: "
               "the layers of additive attention have no bias term.")
class _AddBiases(F_att.AdditiveAttention):
    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__(query_size, key_size, num_hiddens)
        self.W_q = nn.Linear(query_size, num_hiddens)
        self.W_k = nn.Linear(key_size, num_hiddens)
        self.w_v = nn.Linear(num_hiddens, 1)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("d2l's AdditiveAttention",
                   "nn.LazyLinear layers created keys first, torch.bmm")
class _AddAltD2l(nn.Module):
    """d2l's AdditiveAttention: LazyLinear layers (sizes inferred at the first call)."""

    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__()
        self.W_k = nn.LazyLinear(num_hiddens, bias=False)
        self.W_q = nn.LazyLinear(num_hiddens, bias=False)
        self.w_v = nn.LazyLinear(1, bias=False)

    def forward(self, queries, keys, values, valid_lens=None):
        queries, keys = self.W_q(queries), self.W_k(keys)
        features = queries.unsqueeze(2) + keys.unsqueeze(1)
        features = torch.tanh(features)
        scores = self.w_v(features).squeeze(-1)
        self.attention_weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(self.attention_weights, values), self.attention_weights


@alternatives.keep("a loop over the queries",
                   "one query's hidden vectors against all keys at a time")
class _AddAltLoops(nn.Module):
    """One query at a time: its hidden vectors against all keys."""

    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__()
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)

    def forward(self, queries, keys, values, valid_lens=None):
        projected_keys = self.W_k(keys)                       # (batch, num_keys, h)
        columns = []
        for i in range(queries.shape[1]):
            hidden = torch.tanh(self.W_q(queries[:, i:i + 1]) + projected_keys)
            columns.append(self.w_v(hidden)[..., 0])          # (batch, num_keys)
        scores = torch.stack(columns, dim=1)
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


@alternatives.keep("einsum on the weight matrices, float64",
                   "the layers' weights used by einsum in "
"float64, cast back")
class _AddAltEinsumFloat64(nn.Module):
    """The weight matrices used directly (einsum), computed in float64, cast back."""

    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__()
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)

    def forward(self, queries, keys, values, valid_lens=None):
        wq, wk, wv = (m.weight.double() for m in (self.W_q, self.W_k, self.w_v))
        q_side = torch.einsum("bqi,hi->bqh", queries.double(), wq)
        k_side = torch.einsum("bkj,hj->bkh", keys.double(), wk)
        pairs = torch.tanh(q_side[:, :, None, :] + k_side[:, None, :, :])
        scores = torch.einsum("bqkh,h->bqk", pairs, wv[0]).to(queries.dtype)
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.einsum("bqk,bkv->bqv", weights, values), weights


@alternatives.keep("pairs expanded before projecting",
                   "queries and keys expanded to every pair, "
"w_v applied as a matrix product")
class _AddAltExpand(nn.Module):
    """Queries and keys expanded to every pair first, then projected pair by pair."""

    def __init__(self, query_size, key_size, num_hiddens):
        super().__init__()
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)

    def forward(self, queries, keys, values, valid_lens=None):
        b, nq, _ = queries.shape
        nk = keys.shape[1]
        q_pairs = queries.unsqueeze(2).expand(b, nq, nk, queries.shape[-1])
        k_pairs = keys.unsqueeze(1).expand(b, nq, nk, keys.shape[-1])
        scores = (torch.tanh(self.W_q(q_pairs) + self.W_k(k_pairs)) @ self.w_v.weight.T).squeeze(-1)
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(weights, values), weights


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch03_ex2", title="Additive attention as a module", name="AdditiveAttention",
    reference=F_att.AdditiveAttention, kind="class", points=1,
    checks=[
        Check("parameters W_q, W_k, w_v with the right shapes and no biases", _add_params, seed=0,
              compare=same_parameters,
              hint="this check lists the module's parameters (names and shapes) after one call: compare "
                   "them with the contract."),
        Check("queries of size 6, keys of size 4, 1-D valid_lens (given parameters)", _add_one_d, seed=1,
              hint="this check loads given parameters and compares output and weights with one valid "
                   "length per sequence: the score of a (query, key) pair is w_v(tanh(W_q q + W_k k)), each "
                   "query's weights sum to 1 over its valid keys, output = weights times values."),
        Check("2-D valid_lens with a zero length (given parameters)", _add_two_d, seed=2,
              hint="this check gives each query its own valid length, one of them 0: a query with no "
                   "valid key gets all-zero weights and a zero output; the reason above names the first "
                   "item of (output, weights) that differs."),
        Check("random sizes, gradients reach queries and keys (hidden)", _add_random, public=False,
              hint="this check compares output, weights and the gradients with respect to queries and keys "
                   "for random sizes."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
