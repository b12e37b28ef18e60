r"""ch03_ex3: Luong's general score as a module.

The table above mentions a third way to score a pair, the "general" score of
{footcite:t}`luong2015`: a learned matrix $\mathbf{W}$ between query and key,
$a(\mathbf{q}, \mathbf{k}) = \mathbf{q}^\top \mathbf{W} \mathbf{k}$. Like additive attention
it compares queries and keys of different sizes; like the dot product it batches into
matrix products. Write it as a class `BilinearAttention(nn.Module)`.

- `__init__(self, query_size, key_size)` creates one parameter and nothing else: an
  `nn.Parameter` named `W` of shape `(query_size, key_size)` (initialise it as you like;
  the checks load given values by name).
- `forward(self, queries, keys, values, valid_lens=None)` takes queries
  `(batch, num_queries, query_size)`, keys `(batch, num_keys, key_size)`, values
  `(batch, num_keys, d_v)` and `valid_lens` as in Exercise 1. It scores every pair with
  $\mathbf{q}^\top \mathbf{W} \mathbf{k}$ (no scaling), masks with `attn.masked_softmax` and
  returns the tuple `(output, weights)` with shapes `(batch, num_queries, d_v)` and
  `(batch, num_queries, num_keys)`. Gradients must reach queries, keys and values.
- When the last size of `queries` is not `query_size`, raise `ValueError` naming `queries`
  and its shape; when the last size of `keys` is not `key_size`, raise `ValueError` naming
  `keys` and its shape.

With `query_size == key_size` and $\mathbf{W}$ the identity, the module must give exactly
dot-product attention (unscaled); the checks try that too.
"""
from __future__ import annotations

import math
import warnings

from torch import nn
from torch.nn import functional as F
import torch

from ... import functional as F_att
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, same_parameters, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


class BilinearAttention(nn.Module):
    """Luong et al.'s "general" score ``q^T W k``; forward returns ``(output, weights)``."""

    def __init__(self, query_size, key_size):
        super().__init__()
        self.W = nn.Parameter(torch.randn(query_size, key_size) / math.sqrt(query_size * key_size))

    def forward(self, queries, keys, values, valid_lens=None):
        query_size, key_size = self.W.shape
        if queries.shape[-1] != query_size:
            raise ValueError(f"queries has shape {tuple(queries.shape)}, but its last size must be "
                             f"query_size={query_size}")
        if keys.shape[-1] != key_size:
            raise ValueError(f"keys has shape {tuple(keys.shape)}, but its last size must be "
                             f"key_size={key_size}")
        scores = torch.bmm(queries @ self.W, keys.transpose(1, 2))
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(weights, values), weights


# Inputs of the public and hidden checks ---------------------------------------------------


def _bil_params(seed):
    g = gen(seed)
    q, k, v = torch.randn(2, 3, 6, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 2, generator=g)
    return [Call(init_args=(6, 4), init_seed=seed, args=(q, k, v), report=("param_shapes",))]


def _bil_given(seed):
    g = gen(seed)
    W = torch.randn(3, 5, generator=g) / 2
    q, k, v = torch.randn(2, 4, 3, generator=g), torch.randn(2, 6, 5, generator=g), torch.randn(2, 6, 2, generator=g)
    return [Call(init_args=(3, 5), init_seed=0, state_dict={"W": W}, args=(q, k, v, torch.tensor([6, 3])))]


def _bil_square(seed):
    g = gen(seed)
    W = torch.randn(4, 4, generator=g) / 2
    q, k, v = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 3, generator=g)
    lens = torch.tensor([[5, 0, 2], [1, 4, 3]])
    return [Call(init_args=(4, 4), init_seed=0, state_dict={"W": W}, args=(q, k, v, lens)),
            Call(init_args=(4, 4), init_seed=0, state_dict={"W": torch.eye(4)}, args=(q, k, v, lens))]


def _bil_bad(seed):
    g = gen(seed)
    W = torch.randn(3, 5, generator=g)
    return [Call(init_args=(3, 5), init_seed=0, state_dict={"W": W},
                 args=(torch.randn(2, 4, 5, generator=g), torch.randn(2, 6, 5, generator=g),
                       torch.randn(2, 6, 2, generator=g))),
            Call(init_args=(3, 5), init_seed=0, state_dict={"W": W},
                 args=(torch.randn(2, 4, 3, generator=g), torch.randn(2, 6, 3, generator=g),
                       torch.randn(2, 6, 2, generator=g)))]


def _bil_words(call):
    queries, keys = call.args[:2]
    return ["queries", shape_of(queries)] if queries.shape[-1] != call.state_dict["W"].shape[0] \
        else ["keys", shape_of(keys)]


def _bil_random(seed):
    g = gen(seed)
    batch, num_queries, num_keys = randint(g, 2, 4), randint(g, 2, 5), randint(g, 3, 7)
    query_size, key_size, d_v = randint(g, 2, 9), randint(g, 2, 9), randint(g, 1, 5)
    W = torch.randn(query_size, key_size, generator=g) / math.sqrt(query_size)
    q = torch.randn(batch, num_queries, query_size, generator=g)
    k = torch.randn(batch, num_keys, key_size, generator=g)
    v = torch.randn(batch, num_keys, d_v, generator=g)
    lens = torch.randint(0, num_keys + 1, (batch, num_queries), generator=g)
    lens[-1, 0] = 0
    init = (query_size, key_size)
    return [Call(init_args=init, init_seed=2, state_dict={"W": W}, args=(q, k, v)),
            Call(init_args=init, init_seed=2, state_dict={"W": W}, args=(q, k, v, lens), grads_of=(0, 1, 2))]


# Kept mistakes, each with its hint --------------------------------------------------------


def _bil_validate(module, queries, keys):
    query_size, key_size = module.W.shape
    if queries.shape[-1] != query_size:
        raise ValueError(f"queries has shape {tuple(queries.shape)}, expected last size {query_size}")
    if keys.shape[-1] != key_size:
        raise ValueError(f"keys has shape {tuple(keys.shape)}, expected last size {key_size}")


@mistakes.keep("W used transposed",
               "your score is q^T W^T k: W has one row per query feature and one column per key feature, "
               "so the query multiplies W from the left.")
class _BilTransposedW(BilinearAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        _bil_validate(self, queries, keys)
        scores = torch.einsum("bqi,ji,bkj->bqk", queries, self.W, keys)
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


@mistakes.keep("scaled like the Transformer",
               "you divided the scores by sqrt(d); the general score of Luong et al. is q^T W k as it is "
               "(W itself can learn any scale).")
class _BilScaled(BilinearAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        _bil_validate(self, queries, keys)
        scores = (queries @ self.W) @ keys.transpose(1, 2) / math.sqrt(keys.shape[-1])
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


@mistakes.keep("valid_lens ignored",
               "valid_lens is ignored: padded keys still get weight.")
class _BilNoMask(BilinearAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        return super().forward(queries, keys, values, None)


_T_HINT = ("keys.T on a 3-D tensor reverses all three axes: keys of shape (batch, num_keys, key_size) "
           "became (key_size, num_keys, batch), which cannot multiply (queries @ W) of shape (batch, "
           "num_queries, key_size) (or pairs the wrong axes when the sizes happen to agree). The product "
           "needs keys of shape (batch, key_size, num_keys): swap only the last two axes, with "
           "keys.transpose(-2, -1) (or keys.mT).")


def _reversed(keys):
    """keys.T, without torch's deprecation warning (printed in a student's notebook whenever the
    kept mistakes run on a failed check)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return keys.T


@mistakes.keep("keys.T on 3-D keys", _T_HINT)
class _BilKeysT(BilinearAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        _bil_validate(self, queries, keys)
        scores = queries @ self.W @ _reversed(keys)
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


@mistakes.keep("keys.T on 3-D keys, in torch.bmm", _T_HINT)
class _BilKeysTBmm(BilinearAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        _bil_validate(self, queries, keys)
        scores = torch.bmm(queries @ self.W, _reversed(keys))
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(weights, values), weights


@mistakes.keep("nn.Bilinear",
               "nn.Bilinear brings its own parameters (W.weight of shape (1, query_size, key_size) and "
               "W.bias); the contract asks for one nn.Parameter named W of shape (query_size, key_size).")
class _BilNnBilinear(nn.Module):
    # torch's nn.Bilinear: parameters W.weight (1, query_size, key_size) and W.bias.
    def __init__(self, query_size, key_size):
        super().__init__()
        self.W = nn.Bilinear(query_size, key_size, 1)

    def forward(self, queries, keys, values, valid_lens=None):
        b, nq, nk = queries.shape[0], queries.shape[1], keys.shape[1]
        q_pairs = queries.unsqueeze(2).expand(b, nq, nk, queries.shape[-1]).contiguous()
        k_pairs = keys.unsqueeze(1).expand(b, nq, nk, keys.shape[-1]).contiguous()
        scores = self.W(q_pairs, k_pairs).squeeze(-1)
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


@mistakes.keep("no size check",
               "a query or key of the wrong size must be refused with a ValueError that names it and its "
               "shape, before any product is formed.")
class _BilNoValidation(BilinearAttention):
    def forward(self, queries, keys, values, valid_lens=None):
        scores = torch.bmm(queries @ self.W, keys.transpose(1, 2))
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(weights, values), weights


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("one einsum",
                   "einsum('bqi,ij,bkj->bqk'), xavier-initialised W")
class _BilAltEinsum(nn.Module):
    """One three-operand einsum."""

    def __init__(self, query_size, key_size):
        super().__init__()
        self.W = nn.Parameter(torch.empty(query_size, key_size))
        nn.init.xavier_uniform_(self.W)

    def forward(self, queries, keys, values, valid_lens=None):
        qs, ks = self.W.shape
        for name, t, size in (("queries", queries, qs), ("keys", keys, ks)):
            if t.shape[-1] != size:
                raise ValueError(f"{name} {tuple(t.shape)} does not fit W {tuple(self.W.shape)}")
        scores = torch.einsum("bqi,ij,bkj->bqk", queries, self.W, keys)
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.einsum("bqk,bkv->bqv", weights, values), weights


@alternatives.keep("W applied to the keys",
                   "F.linear(keys, W) maps keys into query space, then bmm")
class _BilAltKeysSide(nn.Module):
    """W applied to the keys with F.linear (k -> W k), then a plain dot product with the queries."""

    def __init__(self, query_size, key_size):
        super().__init__()
        self.W = nn.Parameter(torch.zeros(query_size, key_size))

    def forward(self, queries, keys, values, valid_lens=None):
        if queries.size(-1) != self.W.size(0):
            raise ValueError(f"the last size of queries must be {self.W.size(0)}: "
                             f"queries has shape {queries.shape}")
        if keys.size(-1) != self.W.size(1):
            raise ValueError(f"the last size of keys must be {self.W.size(1)}: keys has shape {keys.shape}")
        keys_in_query_space = F.linear(keys, self.W)          # (batch, num_keys, query_size)
        scores = torch.bmm(queries, keys_in_query_space.transpose(1, 2))
        weights = F_att.masked_softmax(scores, valid_lens)
        return torch.bmm(weights, values), weights


@alternatives.keep("loops in float64",
                   "one sequence at a time, q W k^T in float64, cast back")
class _BilAltLoopsFloat64(nn.Module):
    """One sequence at a time, in float64."""

    def __init__(self, query_size, key_size):
        super().__init__()
        self.W = nn.Parameter(torch.randn(query_size, key_size) * 0.1)

    def forward(self, queries, keys, values, valid_lens=None):
        if queries.shape[2] != self.W.shape[0] or keys.shape[2] != self.W.shape[1]:
            bad, t = ("queries", queries) if queries.shape[2] != self.W.shape[0] else ("keys", keys)
            raise ValueError(f"{bad} of shape {list(t.shape)} does not fit W of shape {list(self.W.shape)}")
        w = self.W.double()
        rows = [(queries[b].double() @ w @ keys[b].double().T) for b in range(queries.shape[0])]
        scores = torch.stack(rows).to(queries.dtype)
        weights = F_att.masked_softmax(scores, valid_lens)
        return weights @ values, weights


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch03_ex3", title="Luong's general score as a module", name="BilinearAttention",
    reference=BilinearAttention, kind="class", points=2,
    checks=[
        Check("one parameter W of shape (query_size, key_size)", _bil_params, seed=0,
              compare=same_parameters,
              hint="this check lists the module's parameters (names and shapes) after one call: compare "
                   "them with the contract."),
        Check("queries of size 3, keys of size 5, 1-D valid_lens (given W)", _bil_given, seed=1,
              hint="this check loads a given W of shape (3, 5) and compares output and weights with one "
                   "valid length per sequence: the score of a (query, key) pair is q^T W k, and each "
                   "query's weights sum to 1 over its valid keys."),
        Check("a square W with 2-D valid_lens (one 0); and W = I gives dot-product attention", _bil_square,
              seed=2, hint="this check uses a square, non-symmetric W (and then the identity) with one "
                           "valid length per query, one of them 0: the score is q^T W k, a query with no "
                           "valid key gets zero weights; the reason above names the first call that differs."),
        Check("queries or keys of the wrong size raise ValueError naming the argument and its shape",
              _bil_bad, seed=3, must_mention=_bil_words, weight=0.5,
              hint="compare the last size of queries with W's rows and that of keys with W's columns "
                   "before computing, and name the argument and its shape in the message."),
        Check("random sizes, gradients reach queries, keys and values (hidden)", _bil_random, public=False,
              weight=1.5, hint="this check compares output, weights and the gradients with respect to "
                               "queries, keys and values for random sizes, with and without valid_lens."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
