"""ch07_ex1: The decoder step of Bahdanau et al..

Write a class `BahdanauDecoderStep(nn.Module)` with constructor
`BahdanauDecoderStep(embed_size, num_hiddens)` that creates exactly these parameters: bias-free
linear layers `W_q` and `W_k` (`num_hiddens` → `num_hiddens`) and `w_v` (`num_hiddens` → 1), and
`cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)`.

`forward(prev_hidden, embedded, enc_outputs, valid_lens)` takes the decoder's previous state
`prev_hidden` `(batch, num_hiddens)`, the embedding of the previous output token `embedded`
`(batch, embed_size)`, the encoder states `enc_outputs` `(batch, num_steps, num_hiddens)` and
the valid lengths `valid_lens` `(batch,)` (integers from 1 to `num_steps`), and returns the
tuple `(hidden, context, weights)`:

- `weights` `(batch, num_steps)`: additive attention with **`prev_hidden` as the query**
  (score `w_v(tanh(W_q(prev_hidden) + W_k(h_j)))` for the encoder state `h_j`), a softmax over
  the encoder steps, the padding steps (`j >= valid_lens[b]`) at exactly 0;
- `context` `(batch, num_hiddens)`: the weighted sum of the encoder states;
- `hidden` `(batch, num_hiddens)`: the GRU cell applied to the concatenation
  `[embedded, context]` (in this order, along the last axis) with state `prev_hidden`.

All three are float32 and differentiable with respect to the three tensor inputs.
"""
from __future__ import annotations

from torch import nn
import torch
import torch.nn.functional as F

from ...registry import Alternative, Check, Exercise, Mistake, register
from ...translation import AttentionDecoder as _LibraryAttentionDecoder
from .._kit import Kept, gen, same_parameters
from ._common import (_gru_by_hand, _gru_state, _step_call, _step_param_shapes_calls,
                      _step_random_call, _steps_mask)

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


class BahdanauDecoderStep(nn.Module):
    """One step of the attention decoder of Bahdanau et al.:
    (prev_hidden, embedded, enc_outputs, valid_lens) -> (hidden, context, weights)."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)

    def attend(self, query, enc_outputs, valid_lens, masked=True, squash=torch.tanh, dim=-1):
        features = squash(self.W_q(query).unsqueeze(1) + self.W_k(enc_outputs))
        scores = self.w_v(features).squeeze(-1)
        if masked:
            scores = scores.masked_fill(~_steps_mask(valid_lens, enc_outputs.shape[1]), float("-inf"))
        weights = torch.softmax(scores, dim=dim)
        return torch.bmm(weights.unsqueeze(1), enc_outputs).squeeze(1), weights

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens)
        hidden = self.cell(torch.cat([embedded, context], dim=-1), prev_hidden)
        return hidden, context, weights


# Inputs of the public and hidden checks ---------------------------------------------------


def _bstep_state(g, embed_size, num_hiddens):
    h = num_hiddens
    return {"W_q.weight": 0.5 * torch.randn(h, h, generator=g),
            "W_k.weight": 0.5 * torch.randn(h, h, generator=g),
            "w_v.weight": torch.randn(1, h, generator=g),
            **_gru_state(g, "cell", embed_size + h, h)}


def _bstep_padded(seed):
    return [_step_call(gen(seed), _bstep_state, 3, 6, 3, 5, torch.tensor([6, 2, 4]))]


def _bstep_same_sizes(seed):
    return [_step_call(gen(seed), _bstep_state, 2, 5, 4, 4, torch.tensor([3, 5]))]


def _bstep_random(seed):
    return [_step_random_call(gen(seed), _bstep_state, short=0, init_seed=1)]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("context and embedding swapped",
               "the GRU cell's input must be the embedding followed by the context, [embedded; context], "
               "in that order.")
class _BStepSwapped(BahdanauDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens)
        return self.cell(torch.cat([context, embedded], dim=-1), prev_hidden), context, weights


@mistakes.keep("padding not masked",
               "the padded encoder steps (at or after valid_lens) received weight; hide their scores "
               "before the softmax.")
class _BStepNoMask(BahdanauDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens, masked=False)
        return self.cell(torch.cat([embedded, context], dim=-1), prev_hidden), context, weights


@mistakes.keep("previous state not passed to the cell",
               "the GRU cell started from a zero state: pass prev_hidden to it as its hidden state.")
class _BStepNoState(BahdanauDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens)
        return self.cell(torch.cat([embedded, context], dim=-1)), context, weights


@mistakes.keep("embedding used as the query",
               "the query of the attention is the decoder's previous hidden state, not the embedding of "
               "the previous token.")
class _BStepEmbeddingQuery(BahdanauDecoderStep):
    # Runs only when embed_size == num_hiddens (else W_q cannot read the embedding); with
    # other sizes it behaves like the reference, so it is wrong in exactly one way.
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        query = embedded if embedded.shape[-1] == prev_hidden.shape[-1] else prev_hidden
        context, weights = self.attend(query, enc_outputs, valid_lens)
        return self.cell(torch.cat([embedded, context], dim=-1), prev_hidden), context, weights


@mistakes.keep("no tanh",
               "the scores are linear in the projected query and key: additive attention squashes "
               "their sum with tanh before w_v.")
class _BStepNoTanh(BahdanauDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens, squash=lambda x: x)
        return self.cell(torch.cat([embedded, context], dim=-1), prev_hidden), context, weights


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("d2l conventions",
                   "num_queries axis of 1, 4-D features, -1e6 written into padded scores, "
"bmm; parameters created in another order")
class _BStepD2l(nn.Module):
    """d2l's conventions: a num_queries axis of 1, 4-D features, a masked softmax that
    writes -1e6 into the padded scores, bmm for the context."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)

    @staticmethod
    def _masked_softmax(X, valid_lens):
        shape = X.shape
        flat = X.reshape(-1, shape[-1])
        lens = torch.repeat_interleave(valid_lens, shape[1])
        keep = torch.arange(shape[-1], dtype=torch.float32)[None, :] < lens[:, None]
        flat = flat.clone()
        flat[~keep] = -1e6
        return F.softmax(flat.reshape(shape), dim=-1)

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        queries = self.W_q(prev_hidden.unsqueeze(1))          # (batch, 1, h)
        keys = self.W_k(enc_outputs)                          # (batch, T, h)
        features = torch.tanh(queries.unsqueeze(2) + keys.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)               # (batch, 1, T)
        attention = self._masked_softmax(scores, valid_lens)
        context = torch.bmm(attention, enc_outputs)           # (batch, 1, h)
        x = torch.cat((embedded.unsqueeze(1), context), dim=-1).squeeze(1)
        return self.cell(x, prev_hidden), context.squeeze(1), attention.squeeze(1)


@alternatives.keep("einsum",
                   "explicit weight matrices, einsum, torch.where mask")
class _BStepEinsum(nn.Module):
    """Explicit weight matrices, einsum throughout, torch.where for the mask."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        q = torch.einsum("hd,bd->bh", self.W_q.weight, prev_hidden)
        k = torch.einsum("hd,btd->bth", self.W_k.weight, enc_outputs)
        e = torch.einsum("bth,h->bt", torch.tanh(k + q[:, None]), self.w_v.weight[0])
        valid = torch.arange(enc_outputs.shape[1]).unsqueeze(0) < valid_lens.unsqueeze(1)
        a = torch.where(valid, e, torch.full_like(e, float("-inf"))).softmax(-1)
        c = torch.einsum("bt,bth->bh", a, enc_outputs)
        return self.cell(torch.cat((embedded, c), 1), prev_hidden), c, a


@alternatives.keep("loops",
                   "loops over the encoder steps, the GRU update written out by hand")
class _BStepLoops(nn.Module):
    """A loop over the encoder steps for the scores and the context; the GRU update by hand."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        projected = self.W_q(prev_hidden)
        columns = []
        for j in range(enc_outputs.shape[1]):
            score = self.w_v(torch.tanh(projected + self.W_k(enc_outputs[:, j]))).squeeze(-1)
            columns.append(torch.where(valid_lens > j, score, torch.full_like(score, float("-inf"))))
        weights = torch.softmax(torch.stack(columns, dim=1), dim=1)
        context = torch.zeros_like(prev_hidden)
        for j in range(enc_outputs.shape[1]):
            context = context + weights[:, j:j + 1] * enc_outputs[:, j]
        hidden = _gru_by_hand(self.cell, torch.cat([embedded, context], dim=-1), prev_hidden)
        return hidden, context, weights


@alternatives.keep("float64 inside",
                   "float64 scores and weights, a log-mask added to the scores")
class _BStepFloat64(BahdanauDecoderStep):
    """Everything in float64 inside, a log-mask added to the scores, cast back at the end."""

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        d = torch.float64
        Wq, Wk, wv = (m.weight.to(d) for m in (self.W_q, self.W_k, self.w_v))
        scores = torch.tanh((prev_hidden.to(d) @ Wq.T)[:, None] + enc_outputs.to(d) @ Wk.T) @ wv[0]
        log_mask = torch.log(_steps_mask(valid_lens, enc_outputs.shape[1]).to(d))   # 0 or -inf
        weights = torch.softmax(scores + log_mask, dim=-1)
        context = (weights[..., None] * enc_outputs.to(d)).sum(1)
        hidden = self.cell(torch.cat([embedded, context.to(embedded.dtype)], dim=-1), prev_hidden)
        return hidden, context.to(prev_hidden.dtype), weights.to(prev_hidden.dtype)


@alternatives.keep("own persistent buffer",
                   "a fill value registered as a persistent buffer (the state "
"dicts of the checks do not name it), F.linear, torch.where")
class _BStepOwnBuffer(nn.Module):
    """A persistent buffer of its own (the fill value of the padded scores), F.linear with the
    parameters' weights, the GRU cell called with keywords."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.register_buffer("padding_score", torch.tensor(-1e30))     # persistent: in state_dict
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        keys = F.linear(enc_outputs, self.W_k.weight)
        query = F.linear(prev_hidden, self.W_q.weight)[:, None, :]
        scores = F.linear(torch.tanh(keys + query), self.w_v.weight)[..., 0]
        valid = torch.arange(enc_outputs.shape[1])[None, :] < valid_lens[:, None]
        weights = torch.softmax(torch.where(valid, scores, self.padding_score), dim=-1)
        context = (weights[..., None] * enc_outputs).sum(dim=1)
        hidden = self.cell(input=torch.cat([embedded, context], dim=-1), hx=prev_hidden)
        return hidden, context, weights


@alternatives.keep("the course library's translation.AttentionDecoder",
                   "an adapter of Chapter 7's decoder, whose step takes token ids and returns logits: "
                   "embedding and out replaced by nn.Identity, so step takes the embedded token and "
                   "returns [hidden; context] in place of the logits, split here")
class _BStepLibraryDecoder(_LibraryAttentionDecoder):
    """tr.AttentionDecoder.step, unchanged, with the embedding and the output layer left out."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__(1, embed_size, num_hiddens)
        self.embedding, self.out = nn.Identity(), nn.Identity()

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        hidden_and_context, hidden, weights = self.step(prev_hidden, embedded, enc_outputs, valid_lens)
        return hidden, hidden_and_context[:, hidden.shape[-1]:], weights


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch07_ex1", title="The decoder step of Bahdanau et al.", name="BahdanauDecoderStep",
    reference=BahdanauDecoderStep, kind="class", points=2,
    checks=[
        Check("parameters W_q, W_k, w_v (no biases) and cell with the right shapes",
              _step_param_shapes_calls, seed=0,
              compare=same_parameters,
              hint="compare your parameters' names and shapes with the list in the exercise: W_q and W_k "
                   "(num_hiddens -> num_hiddens), w_v (num_hiddens -> 1), no biases, and the GRU cell."),
        Check("3 sequences of 6 encoder steps with padding (embed_size 3, num_hiddens 5)", _bstep_padded,
              seed=1, hint="this check compares hidden, context and weights: the scores, the padding, "
                           "the weighted sum and what the GRU cell receives each play a part."),
        Check("embed_size equal to num_hiddens", _bstep_same_sizes, seed=2,
              hint="this check uses embed_size == num_hiddens and compares hidden, context and weights; "
                   "the reason above names the first that differs."),
        Check("random sizes, and gradients reach the inputs (hidden)", _bstep_random, public=False,
              hint="check every part of the step for any sizes; keep everything differentiable."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
