"""ch07_ex2: The other recipe: a decoder step of Luong et al..

{footcite:t}`luong2015` update the decoder state *first*, from the previous token alone, and
query with the **new** state. Write a class `LuongDecoderStep(nn.Module)` with constructor
`LuongDecoderStep(embed_size, num_hiddens)` that creates exactly these parameters:
`cell = nn.GRUCell(embed_size, num_hiddens)`, and bias-free linear layers `W_a`
(`num_hiddens` → `num_hiddens`) and `W_c` (`2 * num_hiddens` → `num_hiddens`).

`forward(prev_hidden, embedded, enc_outputs, valid_lens)` takes the decoder's previous state
`prev_hidden` `(batch, num_hiddens)`, the embedding of the previous output token `embedded`
`(batch, embed_size)`, the encoder states `enc_outputs` `(batch, num_steps, num_hiddens)` and
the valid lengths `valid_lens` `(batch,)` (integers from 1 to `num_steps`), and returns the
tuple `(hidden, attentional, weights)`:

- `hidden` `(batch, num_hiddens)`: the GRU cell applied to `embedded` with state `prev_hidden`
  (no context enters the update);
- `weights` `(batch, num_steps)`: Luong's "general" score of the new state against each encoder
  state, `score_j = hidden · W_a(h_j)` (the dot product of `hidden[b]` with `W_a` applied to
  `enc_outputs[b, j]`), a softmax over the encoder steps, the padding steps at exactly 0;
- `attentional` `(batch, num_hiddens)`: `tanh(W_c([context, hidden]))`, where `context` is the
  weighted sum of the encoder states and `[context, hidden]` concatenates along the last axis in
  this order.

All three are float32 and differentiable with respect to the three tensor inputs. (Luong et al.
also feed `attentional` into the next step's input, "input feeding"; leave that out.)
"""
from __future__ import annotations

from torch import nn
import torch
import torch.nn.functional as F

from ...checks.registry import Alternative, Check, Exercise, Mistake, register
from .._kit import Kept, gen, same_parameters
from ._common import (_gru_by_hand, _gru_state, _step_call, _step_param_shapes_calls,
                      _step_random_call, _steps_mask)

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


class LuongDecoderStep(nn.Module):
    """One step of the decoder of Luong et al. (2015), "general" score, no input feeding:
    (prev_hidden, embedded, enc_outputs, valid_lens) -> (hidden, attentional, weights)."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.cell = nn.GRUCell(embed_size, num_hiddens)
        self.W_a = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_c = nn.Linear(2 * num_hiddens, num_hiddens, bias=False)

    def parts(self, prev_hidden, embedded, enc_outputs, valid_lens, query_is_new=True, key_side=True,
              masked=True, context_first=True, squash=torch.tanh):
        hidden = self.cell(embedded, prev_hidden)
        query = hidden if query_is_new else prev_hidden
        if key_side:      # score_j = query . (W_a h_j)
            scores = torch.bmm(self.W_a(enc_outputs), query.unsqueeze(-1)).squeeze(-1)
        else:             # (W_a query) . h_j, which is query . (W_a^T h_j)
            scores = torch.bmm(enc_outputs, self.W_a(query).unsqueeze(-1)).squeeze(-1)
        if masked:
            scores = scores.masked_fill(~_steps_mask(valid_lens, enc_outputs.shape[1]), float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        context = torch.bmm(weights.unsqueeze(1), enc_outputs).squeeze(1)
        pair = [context, hidden] if context_first else [hidden, context]
        return hidden, squash(self.W_c(torch.cat(pair, dim=-1))), weights

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        return self.parts(prev_hidden, embedded, enc_outputs, valid_lens)


# Inputs of the public and hidden checks ---------------------------------------------------


def _lstep_state(g, embed_size, num_hiddens):
    h = num_hiddens
    return {**_gru_state(g, "cell", embed_size, h, scale=0.6),
            "W_a.weight": 0.6 * torch.randn(h, h, generator=g),
            "W_c.weight": 0.6 * torch.randn(h, 2 * h, generator=g)}


def _lstep_padded(seed):
    return [_step_call(gen(seed), _lstep_state, 3, 6, 3, 5, torch.tensor([6, 2, 4]))]


def _lstep_full(seed):
    return [_step_call(gen(seed), _lstep_state, 2, 5, 2, 4, torch.tensor([5, 5]))]


def _lstep_random(seed):
    return [_step_random_call(gen(seed), _lstep_state, short=-1, init_seed=2)]


# Kept mistakes, each with its hint --------------------------------------------------------


def _luong_mistake(**options):
    class _Wrong(LuongDecoderStep):
        def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
            return self.parts(prev_hidden, embedded, enc_outputs, valid_lens, **options)
    return _Wrong


_LuongPrevQuery = mistakes.add("previous state as the query",
                               "that is Bahdanau's query: in Luong's recipe the GRU updates first and the new state "
                               "hidden is the query.",
                               _luong_mistake(query_is_new=False))


_LuongQuerySide = mistakes.add("W_a on the query side",
                               "the score is hidden . (W_a h_j): apply W_a to the encoder states. (W_a hidden) . h_j "
                               "uses the transpose of W_a.",
                               _luong_mistake(key_side=False))


_LuongNoMask = mistakes.add("padding not masked",
                            "the padded encoder steps (at or after valid_lens) received weight; hide their scores "
                            "before the softmax.",
                            _luong_mistake(masked=False))


_LuongSwapped = mistakes.add("hidden and context swapped",
                             "W_c reads the context followed by the new state, [context; hidden], in that order.",
                             _luong_mistake(context_first=False))


_LuongNoTanh = mistakes.add("no tanh on the attentional vector",
                            "the attentional vector is tanh(W_c [context; hidden]): you left out the tanh.",
                            _luong_mistake(squash=lambda x: x))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("query times W_a",
                   "(hidden @ W_a.weight) . h_j, in-place -inf mask, W_c split in two "
"halves; parameters created in another order")
class _LStepQueryTimesW(nn.Module):
    """query^T W_a h_j computed as (query @ W_a.weight) . h_j; W_c split in two halves."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.W_c = nn.Linear(2 * num_hiddens, num_hiddens, bias=False)
        self.W_a = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.cell = nn.GRUCell(embed_size, num_hiddens)

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        h = self.cell(embedded, prev_hidden)
        transformed = h @ self.W_a.weight                                  # (batch, num_hiddens)
        scores = (enc_outputs * transformed[:, None, :]).sum(-1)
        scores[~_steps_mask(valid_lens, enc_outputs.shape[1])] = float("-inf")
        weights = F.softmax(scores, dim=1)
        context = (weights.unsqueeze(-1) * enc_outputs).sum(1)
        n = h.shape[-1]
        mixed = context @ self.W_c.weight[:, :n].T + h @ self.W_c.weight[:, n:].T
        return h, torch.tanh(mixed), weights


@alternatives.keep("einsum",
                   "one three-operand einsum for the score, -1e6 mask")
class _LStepEinsum(nn.Module):
    """One einsum for the bilinear score, a -1e6 (d2l-style) mask, einsum for the context."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.cell = nn.GRUCell(embed_size, num_hiddens)
        self.W_a = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_c = nn.Linear(2 * num_hiddens, num_hiddens, bias=False)

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        s = self.cell(embedded, prev_hidden)
        scores = torch.einsum("bi,ij,btj->bt", s, self.W_a.weight, enc_outputs)
        keep = torch.arange(enc_outputs.shape[1]) < valid_lens[:, None]
        weights = torch.softmax(torch.where(keep, scores, torch.tensor(-1e6)), dim=-1)
        context = torch.einsum("bt,bth->bh", weights, enc_outputs)
        return s, torch.tanh(self.W_c(torch.cat([context, s], -1))), weights


@alternatives.keep("loops in float64",
                   "one sequence and one encoder step at a time, float64 scores, the "
"GRU update by hand")
class _LStepLoopsFloat64(nn.Module):
    """One sequence and one encoder step at a time, scores in float64, the GRU by hand."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.cell = nn.GRUCell(embed_size, num_hiddens)
        self.W_a = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_c = nn.Linear(2 * num_hiddens, num_hiddens, bias=False)

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        hidden = _gru_by_hand(self.cell, embedded, prev_hidden)
        W = self.W_a.weight.double()
        rows, weights_out, outs = [], [], []
        for b in range(enc_outputs.shape[0]):
            n = int(valid_lens[b])
            scores = torch.stack([hidden[b].double() @ W @ enc_outputs[b, j].double() for j in range(n)])
            w = torch.softmax(scores, dim=0)
            full = torch.cat([w, w.new_zeros(enc_outputs.shape[1] - n)])
            weights_out.append(full.to(enc_outputs.dtype))
            context = sum(w[j] * enc_outputs[b, j].double() for j in range(n)).to(enc_outputs.dtype)
            outs.append(torch.tanh(self.W_c(torch.cat([context, hidden[b]]))))
        return hidden, torch.stack(outs), torch.stack(weights_out)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch07_ex2", title="The other recipe: a decoder step of Luong et al.", name="LuongDecoderStep",
    reference=LuongDecoderStep, kind="class", points=2,
    checks=[
        Check("parameters cell, W_a and W_c (no biases) with the right shapes",
              _step_param_shapes_calls, seed=0,
              compare=same_parameters,
              hint="compare your parameters' names and shapes with the list in the exercise: the GRU cell "
                   "reads only the embedding; W_a and W_c have no bias."),
        Check("3 sequences of 6 encoder steps with padding (embed_size 3, num_hiddens 5)", _lstep_padded,
              seed=1, hint="this check compares hidden, attentional and weights: the order of the "
                           "steps (update first), the score, the padding and the attentional vector each play a part."),
        Check("2 sequences without padding (embed_size 2, num_hiddens 4)", _lstep_full, seed=2,
              hint="without padding only the update, the score and the attentional vector matter: "
                   "check them one by one."),
        Check("random sizes, and gradients reach the inputs (hidden)", _lstep_random, public=False,
              hint="check every part of the step for any sizes; keep everything differentiable."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
