r"""ch07_ex1: Coverage: a decoder whose attention remembers where it has looked.

The scores of this chapter cannot tell which source characters the earlier output steps have
already drawn on, so nothing in them stops a decoder from writing one date twice and skipping
another. *Coverage* gives the additive score that memory: {footcite:t}`tu2016coverage` keep
the sum of the earlier attention weights of each source position, and {footcite:t}`see2017`
add that sum inside the tanh of the score, as this exercise does.

Write a class `CoverageDecoder(nn.Module)` with constructor
`CoverageDecoder(embed_size, num_hiddens)` that creates exactly these parameters: bias-free
linear layers `W_q` and `W_k` (`num_hiddens` → `num_hiddens`), `w_c` (1 → `num_hiddens`) and
`w_v` (`num_hiddens` → 1), and `cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)`.

`forward(h0, embedded, enc_outputs, valid_lens)` runs the decoder with teacher forcing. It takes
the initial state `h0` `(batch, num_hiddens)`, the embeddings of the decoder's input tokens
`embedded` `(batch, num_outputs, embed_size)` (output step `i` reads `embedded[:, i]`), the
encoder states `enc_outputs` `(batch, num_steps, num_hiddens)` and the valid lengths
`valid_lens` `(batch,)` (integers from 1 to `num_steps`). Output step `i`, from 0 to
`num_outputs - 1`, starts from the previous state `s` (`h0` at step 0) and computes, in this
order:

- the coverage `cov[b, j]`: the sum of the weights that encoder step `j` received at the
  output steps before `i` (zero at step 0);
- the weights `(batch, num_steps)`: a softmax over the encoder steps of the scores
  `w_v(tanh(W_q(s) + W_k(h_j) + w_c(cov[b, j])))`, where `h_j` is the encoder state `j` and
  `w_c` turns the one number `cov[b, j]` into `num_hiddens` numbers; the padding steps
  (`j >= valid_lens[b]`) get exactly 0;
- the context: the weighted sum of the encoder states;
- the new state: the GRU cell applied to `[embedded[:, i], context]` (concatenated along the
  last axis, in this order) with state `s`.

Return the tuple `(states, weights, coverage)`: `states` `(batch, num_outputs, num_hiddens)`,
the new state of every output step; `weights` `(batch, num_outputs, num_steps)`, the weights of
every output step; `coverage` `(batch, num_steps)`, the sum of the weights of all
`num_outputs` steps. All three are float32 and differentiable with respect to `h0`, `embedded`
and `enc_outputs`.
"""
from __future__ import annotations

from torch import nn
import torch
import torch.nn.functional as F

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from ...translation import AttentionDecoder as _LibraryAttentionDecoder
from .._kit import Kept, gen, randint, same_parameters
from ._common import _gru_by_hand, _gru_state, _steps_mask

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


class CoverageDecoder(nn.Module):
    """Bahdanau's decoder run with teacher forcing, its additive scores told the coverage:
    (h0, embedded, enc_outputs, valid_lens) -> (states, weights, coverage)."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        # Written unlike the course library's decoder, so no line of this answer is a line of it.
        self.W_q, self.W_k = (nn.Linear(num_hiddens, num_hiddens, False) for _ in "qk")
        self.w_c = nn.Linear(in_features=1, out_features=num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, out_features=1, bias=False)
        self.cell = nn.GRUCell(input_size=embed_size + num_hiddens, hidden_size=num_hiddens)

    # The kept mistakes change one of these hooks each.
    def score(self, query, keys, coverage):
        return self.w_v(torch.tanh(self.W_q(query)[:, None] + keys + self.w_c(coverage[..., None]))).squeeze(-1)

    def mask(self, scores, valid_lens):
        return scores.masked_fill(~_steps_mask(valid_lens, scores.shape[1]), float("-inf"))

    def next_coverage(self, coverage, weights):
        return coverage + weights

    def forward(self, h0, embedded, enc_outputs, valid_lens):
        projected = self.W_k(enc_outputs)                     # the same at every output step
        state, coverage = h0, enc_outputs.new_zeros(enc_outputs.shape[:2])
        states, rows = [], []
        for i in range(embedded.shape[1]):
            weights = torch.softmax(self.mask(self.score(state, projected, coverage), valid_lens), dim=-1)
            context = torch.bmm(weights[:, None], enc_outputs).squeeze(1)
            state = self.cell(torch.cat([embedded[:, i], context], dim=-1), state)
            coverage = self.next_coverage(coverage, weights)
            states.append(state)
            rows.append(weights)
        return torch.stack(states, dim=1), torch.stack(rows, dim=1), coverage


# Inputs of the public and hidden checks ---------------------------------------------------


def _cov_state(g, embed_size, num_hiddens, coverage_scale):
    h = num_hiddens
    return {"W_q.weight": 0.5 * torch.randn(h, h, generator=g),
            "W_k.weight": 0.5 * torch.randn(h, h, generator=g),
            "w_c.weight": coverage_scale * torch.randn(h, 1, generator=g),
            "w_v.weight": torch.randn(1, h, generator=g),
            **_gru_state(g, "cell", embed_size + h, h)}


def _cov_inputs(g, batch, num_outputs, num_steps, embed_size, num_hiddens, lens):
    return (torch.randn(batch, num_hiddens, generator=g),
            torch.randn(batch, num_outputs, embed_size, generator=g),
            torch.randn(batch, num_steps, num_hiddens, generator=g), lens)


def _cov_call(g, batch, num_outputs, num_steps, embed_size, num_hiddens, lens, coverage_scale=0.7,
              **extra):
    state = _cov_state(g, embed_size, num_hiddens, coverage_scale)
    args = _cov_inputs(g, batch, num_outputs, num_steps, embed_size, num_hiddens, lens)
    return Call(init_args=(embed_size, num_hiddens), init_seed=0, state_dict=state, args=args, **extra)


def _cov_param_shapes(seed):
    """The shapes of the answer's own parameters (nothing loaded): embed_size 3, num_hiddens 5."""
    g = gen(seed)
    return [Call(init_args=(3, 5), init_seed=seed, args=_cov_inputs(g, 2, 3, 4, 3, 5, torch.tensor([4, 2])),
                 report=("param_shapes",))]


def _cov_padded(seed):
    return [_cov_call(gen(seed), 3, 4, 6, 3, 5, torch.tensor([6, 2, 4]))]


def _cov_strong(seed):
    # A large w_c: the coverage moves the weights far, and a sequence of one valid step
    # gathers all of every step's weight on encoder step 0.
    return [_cov_call(gen(seed), 3, 5, 5, 2, 4, torch.tensor([5, 3, 1]), coverage_scale=2.5)]


def _cov_random(seed):
    g = gen(seed)
    batch, num_outputs, num_steps = randint(g, 2, 5), randint(g, 2, 6), randint(g, 3, 8)
    embed_size, num_hiddens = randint(g, 2, 6), randint(g, 2, 7)
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g)
    lens[0] = 1
    return [_cov_call(g, batch, num_outputs, num_steps, embed_size, num_hiddens, lens,
                      coverage_scale=1.5, grads_of=(0, 1, 2))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("coverage not accumulated",
               "the coverage held only the weights of the step just before; it is the sum of the weights "
               "of every earlier output step.")
class _CovNotSummed(CoverageDecoder):
    def next_coverage(self, coverage, weights):
        return weights


@mistakes.keep("coverage left out of the scores",
               "the scores were those of the chapter's decoder, without the w_c(cov) term: the coverage "
               "must enter each score inside the tanh.")
class _CovUnused(CoverageDecoder):
    def score(self, query, keys, coverage):
        return self.w_v(torch.tanh(self.W_q(query)[:, None] + keys)).squeeze(-1)


@mistakes.keep("coverage added after the tanh",
               "w_c(cov) was added after the tanh; it belongs inside it, with W_q(s) and W_k(h_j).")
class _CovAfterTanh(CoverageDecoder):
    def score(self, query, keys, coverage):
        return self.w_v(torch.tanh(self.W_q(query)[:, None] + keys) + self.w_c(coverage[..., None])).squeeze(-1)


@mistakes.keep("returned coverage misses the last step",
               "the coverage returned is the one the last step's scores read, without that step's own "
               "weights; return the sum over all num_outputs steps.")
class _CovReturnedEarly(CoverageDecoder):
    def forward(self, h0, embedded, enc_outputs, valid_lens):
        states, weights, _ = super().forward(h0, embedded, enc_outputs, valid_lens)
        return states, weights, weights[:, :-1].sum(dim=1)


@mistakes.keep("state not carried",
               "every output step started from h0: each step starts from the state the step before "
               "returned.")
class _CovStateReset(CoverageDecoder):
    def forward(self, h0, embedded, enc_outputs, valid_lens):
        keys = self.W_k(enc_outputs)
        coverage = enc_outputs.new_zeros(enc_outputs.shape[:2])
        states, rows = [], []
        for i in range(embedded.shape[1]):
            weights = torch.softmax(self.mask(self.score(h0, keys, coverage), valid_lens), dim=-1)
            context = torch.bmm(weights[:, None], enc_outputs).squeeze(1)
            states.append(self.cell(torch.cat([embedded[:, i], context], dim=-1), h0))
            coverage = coverage + weights
            rows.append(weights)
        return torch.stack(states, dim=1), torch.stack(rows, dim=1), coverage


@mistakes.keep("padding not masked",
               "the padded encoder steps (at or after valid_lens) received weight, and so coverage; hide "
               "their scores before the softmax.")
class _CovNoMask(CoverageDecoder):
    def mask(self, scores, valid_lens):
        return scores


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("the course library's AttentionDecoder",
                   "a subclass of tr.AttentionDecoder whose attend gets keys W_k(h_j) + w_c(cov) through its "
                   "keys argument; embedding and out replaced by nn.Identity")
class _CovLibrary(_LibraryAttentionDecoder):
    """The chapter's attend and step, unchanged: the coverage term rides in on the keys."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__(1, embed_size, num_hiddens)
        self.embedding, self.out = nn.Identity(), nn.Identity()
        self.w_c = nn.Linear(1, num_hiddens, bias=False)

    def forward(self, h0, embedded, enc_outputs, valid_lens):
        hidden, coverage = h0, torch.zeros_like(enc_outputs[..., 0])
        keys = self.W_k(enc_outputs)
        all_states, all_weights = [], []
        for i in range(embedded.shape[1]):
            _, hidden, weights = self.step(hidden, embedded[:, i], enc_outputs, valid_lens,
                                           keys=keys + self.w_c(coverage.unsqueeze(-1)))
            coverage = coverage + weights
            all_states.append(hidden)
            all_weights.append(weights)
        return torch.stack(all_states, 1), torch.stack(all_weights, 1), coverage


@alternatives.keep("einsum and preallocated outputs",
                   "explicit weight matrices, einsum, torch.where with -inf, outputs written into "
                   "preallocated tensors (cloned to keep autograd happy)")
class _CovEinsum(nn.Module):
    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.w_c = nn.Linear(1, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)

    def forward(self, h0, embedded, enc_outputs, valid_lens):
        batch, num_outputs, _ = embedded.shape
        num_steps = enc_outputs.shape[1]
        k = torch.einsum("hd,btd->bth", self.W_k.weight, enc_outputs)
        valid = torch.arange(num_steps)[None] < valid_lens[:, None]
        states = []
        weights = enc_outputs.new_zeros(batch, num_outputs, num_steps)
        s, cov = h0, enc_outputs.new_zeros(batch, num_steps)
        for i in range(num_outputs):
            q = torch.einsum("hd,bd->bh", self.W_q.weight, s)
            f = torch.tanh(k + q[:, None] + torch.einsum("h,bt->bth", self.w_c.weight[:, 0], cov))
            e = torch.einsum("bth,h->bt", f, self.w_v.weight[0])
            a = torch.where(valid, e, torch.full_like(e, float("-inf"))).softmax(-1)
            weights = weights.clone()
            weights[:, i] = a
            c = torch.einsum("bt,bth->bh", a, enc_outputs)
            s = self.cell(torch.cat((embedded[:, i], c), 1), s)
            states.append(s)
            cov = cov + a
        return torch.stack(states, 1), weights, cov


@alternatives.keep("float64 inside, the GRU by hand, coverage from the stored rows",
                   "scores and weights in float64 with a log-mask, the GRU update written out, the "
                   "coverage recomputed at each step as the sum of the rows kept so far")
class _CovFloat64(nn.Module):
    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.w_c = nn.Linear(1, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)

    def forward(self, h0, embedded, enc_outputs, valid_lens):
        d = torch.float64
        Wq, Wk, wc, wv = (m.weight.to(d) for m in (self.W_q, self.W_k, self.w_c, self.w_v))
        annotations = enc_outputs.to(d)
        log_mask = torch.log(_steps_mask(valid_lens, enc_outputs.shape[1]).to(d))     # 0 or -inf
        state, states, rows = h0, [], []
        for i in range(embedded.shape[1]):
            cov = sum(rows) if rows else torch.zeros_like(log_mask)
            features = torch.tanh((state.to(d) @ Wq.T)[:, None] + annotations @ Wk.T + cov[..., None] * wc[:, 0])
            weights = torch.softmax(features @ wv[0] + log_mask, dim=-1)
            context = (weights[..., None] * annotations).sum(1).to(torch.float32)
            state = _gru_by_hand(self.cell, torch.cat([embedded[:, i], context], dim=-1), state)
            states.append(state)
            rows.append(weights)
        return (torch.stack(states, 1), torch.stack(rows, 1).to(torch.float32),
                sum(rows).to(torch.float32))


@alternatives.keep("d2l conventions, one sequence at a time",
                   "each sequence on its own, a num_queries axis of 1, -1e6 written into the padded "
                   "scores, F.linear, the cell called with keywords")
class _CovOneSequence(nn.Module):
    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.w_c = nn.Linear(1, num_hiddens, bias=False)
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)

    def forward(self, h0, embedded, enc_outputs, valid_lens):
        outs = []
        for b in range(h0.shape[0]):
            n = int(valid_lens[b])
            h, cov = h0[b:b + 1], torch.zeros(1, 1, n)               # (1, num_queries=1, n)
            memory = enc_outputs[b:b + 1, :n]
            keys = F.linear(memory, self.W_k.weight)[:, None]          # (1, 1, n, h)
            states, rows = [], []
            for i in range(embedded.shape[1]):
                query = F.linear(h, self.W_q.weight)[:, None, None]    # (1, 1, 1, h)
                feats = torch.tanh(query + keys + F.linear(cov[..., None], self.w_c.weight))
                scores = F.linear(feats, self.w_v.weight)[..., 0]       # (1, 1, n)
                scores = torch.cat([scores, torch.full((1, 1, enc_outputs.shape[1] - n), -1e6)], dim=-1)
                attention = F.softmax(scores, dim=-1)
                context = torch.bmm(attention[..., :n], memory)[:, 0]
                h = self.cell(input=torch.cat([embedded[b:b + 1, i], context], dim=-1), hx=h)
                cov = cov + attention[..., :n]
                states.append(h[0])
                rows.append(attention[0, 0])
            outs.append((torch.stack(states), torch.stack(rows), sum(rows)))
        return tuple(torch.stack(parts) for parts in zip(*outs))


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch07_ex1", title="Coverage: a decoder whose attention remembers where it has looked",
    name="CoverageDecoder", reference=CoverageDecoder, kind="class", points=3,
    checks=[
        Check("parameters W_q, W_k, w_c, w_v (no biases) and cell with the right shapes",
              _cov_param_shapes, seed=0, compare=same_parameters,
              hint="compare your parameters' names and shapes with the list in the exercise: W_q and W_k "
                   "(num_hiddens -> num_hiddens), w_c (1 -> num_hiddens), w_v (num_hiddens -> 1), no "
                   "biases, and the GRU cell."),
        Check("3 sequences with padding, 4 output steps over 6 encoder steps", _cov_padded, seed=1,
              hint="this check compares the states, the weights and the coverage of every step; the "
                   "reason above names the first that differs."),
        Check("a large w_c, and a sequence of one valid encoder step", _cov_strong, seed=2,
              hint="with a large w_c the coverage moves the weights far; this check compares the states, "
                   "the weights and the returned coverage."),
        Check("random sizes, and gradients reach the inputs (hidden)", _cov_random, public=False,
              hint="check every part of every step for any sizes; keep everything differentiable."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
