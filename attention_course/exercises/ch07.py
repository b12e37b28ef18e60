"""Chapter 7 exercises: Bahdanau attention in a GRU encoder-decoder.

ch07_ex1  BahdanauDecoderStep(embed_size, num_hiddens)  forward -> (hidden, context, weights)
ch07_ex2  LuongDecoderStep(embed_size, num_hiddens)     forward -> (hidden, attentional, weights)
ch07_ex3  GreedyDecoder(AttentionDecoder).greedy(h0, enc_outputs, valid_lens, max_len, bos=1)
ch07_ex4  hard_alignment(weights) -> (positions, monotonicity)
ch07_ex5  BidirectionalEncoder(vocab_size, embed_size, num_hiddens)  forward(src, src_lens) -> outputs

Each exercise teaches one thing: ex1 the decoder step of Bahdanau et al. (query =
the *previous* state, the context feeds the GRU update); ex2 the other recipe, of
Luong et al. (update first, query = the *new* state, a bilinear score, an
attentional vector), which the chapter describes but does not show; ex3 greedy
decoding around a given step; ex4 reading an alignment; ex5 the bidirectional
encoder of the paper on a padded batch, where the backward direction must start at
each sequence's own last character (the chapter only mentions it).

Parameter values always come from a ``state_dict`` given by the check, so the order
in which a module creates its parameters never matters. Every exercise keeps
mistakes (wrong in one way each, with their own hint) and correct alternatives in
other styles, which the tests run through every check.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..registry import Alternative, Call, Check, Exercise, Mistake, register
from ..translation import AttentionDecoder


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randint(g, low, high) -> int:
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _steps_mask(valid_lens, num_steps):
    """True at the valid steps, (batch, num_steps)."""
    return torch.arange(num_steps)[None, :] < valid_lens[:, None]


def _same_parameters(got, want, calls):
    for g, w in zip(got, want):
        if g["status"] != "ok":
            return f"raised {g['error_type']}: {g['message'][:300]}"
        mine, theirs = g.get("extras", {}).get("param_shapes"), w["extras"]["param_shapes"]
        if mine != theirs:
            return f"the parameters (name: shape) are {mine}, expected {theirs}"
    return None


def _gru_by_hand(cell: nn.GRUCell, x, h):
    """nn.GRUCell's update written out (PyTorch's gate order r, z, n)."""
    gi = x @ cell.weight_ih.T + cell.bias_ih
    gh = h @ cell.weight_hh.T + cell.bias_hh
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = gh.chunk(3, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def _gru_state(g, name, input_size, h, scale=0.4):
    return {f"{name}.weight_ih": scale * torch.randn(3 * h, input_size, generator=g),
            f"{name}.weight_hh": scale * torch.randn(3 * h, h, generator=g),
            f"{name}.bias_ih": 0.1 * torch.randn(3 * h, generator=g),
            f"{name}.bias_hh": 0.1 * torch.randn(3 * h, generator=g)}


def _step_inputs(g, batch, num_steps, embed_size, num_hiddens, lens):
    return (torch.randn(batch, num_hiddens, generator=g), torch.randn(batch, embed_size, generator=g),
            torch.randn(batch, num_steps, num_hiddens, generator=g), lens)


# ======================================================= ch07_ex1 BahdanauDecoderStep

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


class _BStepSwapped(BahdanauDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens)
        return self.cell(torch.cat([context, embedded], dim=-1), prev_hidden), context, weights


class _BStepNoMask(BahdanauDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens, masked=False)
        return self.cell(torch.cat([embedded, context], dim=-1), prev_hidden), context, weights


class _BStepNoState(BahdanauDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens)
        return self.cell(torch.cat([embedded, context], dim=-1)), context, weights


class _BStepEmbeddingQuery(BahdanauDecoderStep):
    # Runs only when embed_size == num_hiddens (else W_q cannot read the embedding); with
    # other sizes it behaves like the reference, so it is wrong in exactly one way.
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        query = embedded if embedded.shape[-1] == prev_hidden.shape[-1] else prev_hidden
        context, weights = self.attend(query, enc_outputs, valid_lens)
        return self.cell(torch.cat([embedded, context], dim=-1), prev_hidden), context, weights


class _BStepNoTanh(BahdanauDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens, squash=lambda x: x)
        return self.cell(torch.cat([embedded, context], dim=-1), prev_hidden), context, weights


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


def _bstep_state(g, embed_size, num_hiddens):
    h = num_hiddens
    return {"W_q.weight": 0.5 * torch.randn(h, h, generator=g),
            "W_k.weight": 0.5 * torch.randn(h, h, generator=g),
            "w_v.weight": torch.randn(1, h, generator=g),
            **_gru_state(g, "cell", embed_size + h, h)}


def _bstep_params(seed):
    g = _gen(seed)
    return [Call(init_args=(3, 5), init_seed=seed, args=_step_inputs(g, 2, 4, 3, 5, torch.tensor([4, 2])),
                 report=("param_shapes",))]


def _bstep_padded(seed):
    g = _gen(seed)
    return [Call(init_args=(3, 5), init_seed=0, state_dict=_bstep_state(g, 3, 5),
                 args=_step_inputs(g, 3, 6, 3, 5, torch.tensor([6, 2, 4])))]


def _bstep_same_sizes(seed):
    g = _gen(seed)
    return [Call(init_args=(4, 4), init_seed=0, state_dict=_bstep_state(g, 4, 4),
                 args=_step_inputs(g, 2, 5, 4, 4, torch.tensor([3, 5])))]


def _bstep_random(seed):
    g = _gen(seed)
    batch, num_steps, embed_size, num_hiddens = (_randint(g, 2, 5), _randint(g, 3, 8),
                                                 _randint(g, 2, 6), _randint(g, 2, 7))
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g)
    lens[0] = 1
    return [Call(init_args=(embed_size, num_hiddens), init_seed=1,
                 state_dict=_bstep_state(g, embed_size, num_hiddens),
                 args=_step_inputs(g, batch, num_steps, embed_size, num_hiddens, lens), grads_of=(0, 1, 2))]


register(Exercise(
    label="ch07_ex1", title="The decoder step of Bahdanau et al.", name="BahdanauDecoderStep",
    reference=BahdanauDecoderStep, kind="class", points=2,
    checks=[
        Check("parameters W_q, W_k, w_v (no biases) and cell with the right shapes", _bstep_params, seed=0,
              compare=_same_parameters,
              hint="compare your parameters' names and shapes with the list in the exercise: W_q and W_k "
                   "(num_hiddens -> num_hiddens), w_v (num_hiddens -> 1), no biases, and the GRU cell."),
        Check("3 sequences of 6 encoder steps with padding (embed_size 3, num_hiddens 5)", _bstep_padded,
              seed=1, hint="this check compares hidden, context and weights: look at the scores, the padding, "
                           "the weighted sum and what the GRU cell receives."),
        Check("embed_size equal to num_hiddens", _bstep_same_sizes, seed=2,
              hint="this check uses embed_size == num_hiddens and compares hidden, context and weights; "
                   "the reason above names the first that differs."),
        Check("random sizes, and gradients reach the inputs (hidden)", _bstep_random, public=False,
              hint="check every part of the step for any sizes; keep everything differentiable."),
    ],
    mistakes=[
        Mistake("context and embedding swapped",
                "the GRU cell's input must be the embedding followed by the context, [embedded; context], "
                "in that order.", _BStepSwapped),
        Mistake("padding not masked",
                "the padded encoder steps (at or after valid_lens) received weight; hide their scores "
                "before the softmax.", _BStepNoMask),
        Mistake("previous state not passed to the cell",
                "the GRU cell started from a zero state: pass prev_hidden to it as its hidden state.",
                _BStepNoState),
        Mistake("embedding used as the query",
                "the query of the attention is the decoder's previous hidden state, not the embedding of "
                "the previous token.", _BStepEmbeddingQuery),
        Mistake("no tanh",
                "the scores are linear in the projected query and key: additive attention squashes "
                "their sum with tanh before w_v.", _BStepNoTanh),
    ],
    alternatives=[
        Alternative("d2l conventions", "num_queries axis of 1, 4-D features, -1e6 written into padded scores, "
                    "bmm; parameters created in another order", _BStepD2l),
        Alternative("einsum", "explicit weight matrices, einsum, torch.where mask", _BStepEinsum),
        Alternative("loops", "loops over the encoder steps, the GRU update written out by hand", _BStepLoops),
        Alternative("float64 inside", "float64 scores and weights, a log-mask added to the scores",
                    _BStepFloat64),
        Alternative("own persistent buffer", "a fill value registered as a persistent buffer (the state "
                    "dicts of the checks do not name it), F.linear, torch.where", _BStepOwnBuffer),
    ],
))


# ======================================================= ch07_ex2 LuongDecoderStep

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


def _luong_mistake(**options):
    class _Wrong(LuongDecoderStep):
        def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
            return self.parts(prev_hidden, embedded, enc_outputs, valid_lens, **options)
    return _Wrong


_LuongPrevQuery = _luong_mistake(query_is_new=False)
_LuongQuerySide = _luong_mistake(key_side=False)
_LuongNoMask = _luong_mistake(masked=False)
_LuongSwapped = _luong_mistake(context_first=False)
_LuongNoTanh = _luong_mistake(squash=lambda x: x)


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


def _lstep_state(g, embed_size, num_hiddens):
    h = num_hiddens
    return {**_gru_state(g, "cell", embed_size, h, scale=0.6),
            "W_a.weight": 0.6 * torch.randn(h, h, generator=g),
            "W_c.weight": 0.6 * torch.randn(h, 2 * h, generator=g)}


def _lstep_params(seed):
    g = _gen(seed)
    return [Call(init_args=(3, 5), init_seed=seed, args=_step_inputs(g, 2, 4, 3, 5, torch.tensor([4, 2])),
                 report=("param_shapes",))]


def _lstep_padded(seed):
    g = _gen(seed)
    return [Call(init_args=(3, 5), init_seed=0, state_dict=_lstep_state(g, 3, 5),
                 args=_step_inputs(g, 3, 6, 3, 5, torch.tensor([6, 2, 4])))]


def _lstep_full(seed):
    g = _gen(seed)
    return [Call(init_args=(2, 4), init_seed=0, state_dict=_lstep_state(g, 2, 4),
                 args=_step_inputs(g, 2, 5, 2, 4, torch.tensor([5, 5])))]


def _lstep_random(seed):
    g = _gen(seed)
    batch, num_steps, embed_size, num_hiddens = (_randint(g, 2, 5), _randint(g, 3, 8),
                                                 _randint(g, 2, 6), _randint(g, 2, 7))
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g)
    lens[-1] = 1
    return [Call(init_args=(embed_size, num_hiddens), init_seed=2,
                 state_dict=_lstep_state(g, embed_size, num_hiddens),
                 args=_step_inputs(g, batch, num_steps, embed_size, num_hiddens, lens), grads_of=(0, 1, 2))]


register(Exercise(
    label="ch07_ex2", title="The other recipe: a decoder step of Luong et al.", name="LuongDecoderStep",
    reference=LuongDecoderStep, kind="class", points=2,
    checks=[
        Check("parameters cell, W_a and W_c (no biases) with the right shapes", _lstep_params, seed=0,
              compare=_same_parameters,
              hint="compare your parameters' names and shapes with the list in the exercise: the GRU cell "
                   "reads only the embedding; W_a and W_c have no bias."),
        Check("3 sequences of 6 encoder steps with padding (embed_size 3, num_hiddens 5)", _lstep_padded,
              seed=1, hint="this check compares hidden, attentional and weights: look at the order of the "
                           "steps (update first), the score, the padding and the attentional vector."),
        Check("2 sequences without padding (embed_size 2, num_hiddens 4)", _lstep_full, seed=2,
              hint="without padding only the update, the score and the attentional vector matter: "
                   "check them one by one."),
        Check("random sizes, and gradients reach the inputs (hidden)", _lstep_random, public=False,
              hint="check every part of the step for any sizes; keep everything differentiable."),
    ],
    mistakes=[
        Mistake("previous state as the query",
                "that is Bahdanau's query: in Luong's recipe the GRU updates first and the new state "
                "hidden is the query.", _LuongPrevQuery),
        Mistake("W_a on the query side",
                "the score is hidden . (W_a h_j): apply W_a to the encoder states. (W_a hidden) . h_j "
                "uses the transpose of W_a.", _LuongQuerySide),
        Mistake("padding not masked",
                "the padded encoder steps (at or after valid_lens) received weight; hide their scores "
                "before the softmax.", _LuongNoMask),
        Mistake("hidden and context swapped",
                "W_c reads the context followed by the new state, [context; hidden], in that order.",
                _LuongSwapped),
        Mistake("no tanh on the attentional vector",
                "the attentional vector is tanh(W_c [context; hidden]): you left out the tanh.", _LuongNoTanh),
    ],
    alternatives=[
        Alternative("query times W_a", "(hidden @ W_a.weight) . h_j, in-place -inf mask, W_c split in two "
                    "halves; parameters created in another order", _LStepQueryTimesW),
        Alternative("einsum", "one three-operand einsum for the score, -1e6 mask", _LStepEinsum),
        Alternative("loops in float64", "one sequence and one encoder step at a time, float64 scores, the "
                    "GRU update by hand", _LStepLoopsFloat64),
    ],
))


# ======================================================= ch07_ex3 GreedyDecoder.greedy

class GreedyDecoder(AttentionDecoder):
    """The course's AttentionDecoder with a greedy decoding loop."""

    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        tokens = torch.full((h0.shape[0],), bos, dtype=torch.long)
        hidden, out_tokens, out_weights = h0, [], []
        for _ in range(max_len):
            logits, hidden, weights = self.step(hidden, tokens, enc_outputs, valid_lens)
            tokens = logits.argmax(dim=-1)
            out_tokens.append(tokens)
            out_weights.append(weights)
        return torch.stack(out_tokens, dim=1), torch.stack(out_weights, dim=1)


class _GreedyAlwaysBos(AttentionDecoder):
    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        start = torch.full((h0.shape[0],), bos, dtype=torch.long)
        hidden, out_tokens, out_weights = h0, [], []
        for _ in range(max_len):
            logits, hidden, weights = self.step(hidden, start, enc_outputs, valid_lens)
            out_tokens.append(logits.argmax(dim=-1))
            out_weights.append(weights)
        return torch.stack(out_tokens, dim=1), torch.stack(out_weights, dim=1)


class _GreedyStateReset(AttentionDecoder):
    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        tokens = torch.full((h0.shape[0],), bos, dtype=torch.long)
        out_tokens, out_weights = [], []
        for _ in range(max_len):
            logits, _, weights = self.step(h0, tokens, enc_outputs, valid_lens)
            tokens = logits.argmax(dim=-1)
            out_tokens.append(tokens)
            out_weights.append(weights)
        return torch.stack(out_tokens, dim=1), torch.stack(out_weights, dim=1)


class _GreedyRecordsInput(AttentionDecoder):
    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        tokens = torch.full((h0.shape[0],), bos, dtype=torch.long)
        hidden, out_tokens, out_weights = h0, [], []
        for _ in range(max_len):
            out_tokens.append(tokens)
            logits, hidden, weights = self.step(hidden, tokens, enc_outputs, valid_lens)
            tokens = logits.argmax(dim=-1)
            out_weights.append(weights)
        return torch.stack(out_tokens, dim=1), torch.stack(out_weights, dim=1)


class _GreedyWeightsTransposed(GreedyDecoder):
    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        tokens, weights = super().greedy(h0, enc_outputs, valid_lens, max_len, bos)
        return tokens, weights.transpose(1, 2)


class _GreedyPreallocated(AttentionDecoder):
    """Output tensors allocated first and filled in place; the keys computed once."""

    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        batch, num_steps = enc_outputs.shape[:2]
        tokens = torch.empty(batch, max_len, dtype=torch.long)
        weights = enc_outputs.new_empty(batch, max_len, num_steps)
        keys = self.W_k(enc_outputs)
        previous, state = torch.full((batch,), bos, dtype=torch.long), h0
        for t in range(max_len):
            logits, state, weights[:, t] = self.step(state, previous, enc_outputs, valid_lens, keys=keys)
            tokens[:, t] = previous = logits.max(dim=-1).indices
        return tokens, weights


class _GreedyRecursive(AttentionDecoder):
    """A recursion over the remaining steps, outputs joined with torch.cat."""

    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        def run(state, previous, remaining):
            if remaining == 0:
                return (torch.zeros(h0.shape[0], 0, dtype=torch.long),
                        enc_outputs.new_zeros(h0.shape[0], 0, enc_outputs.shape[1]))
            logits, state, w = self.step(state, previous, enc_outputs, valid_lens)
            best = torch.argmax(logits, dim=1)
            rest_tokens, rest_weights = run(state, best, remaining - 1)
            return torch.cat([best[:, None], rest_tokens], 1), torch.cat([w[:, None], rest_weights], 1)

        start = torch.tensor([bos] * h0.shape[0])
        return run(h0, start, max_len)


class _GreedyOneSequence(AttentionDecoder):
    """Each sequence decoded on its own (batch of one), then stacked."""

    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        all_tokens, all_weights = [], []
        for b in range(h0.shape[0]):
            state, token = h0[b:b + 1], torch.tensor([bos])
            tokens, weights = [], []
            for _ in range(max_len):
                logits, state, w = self.step(state, token, enc_outputs[b:b + 1], valid_lens[b:b + 1])
                token = logits.argmax(-1)
                tokens.append(int(token))
                weights.append(w[0])
            all_tokens.append(torch.tensor(tokens))
            all_weights.append(torch.stack(weights))
        return torch.stack(all_tokens), torch.stack(all_weights)


def _decoder_state(g, vocab_size, embed_size, num_hiddens):
    # Large random weights, so that the predicted token depends strongly on the input token
    # and on the state (small ones would predict the same token at every step).
    template = AttentionDecoder(vocab_size, embed_size, num_hiddens).state_dict()
    return {name: 1.5 * torch.randn(value.shape, generator=g) for name, value in template.items()}


def _greedy_call(g, batch, num_steps, vocab, embed, hidden, max_len, lens, **kwargs):
    state = _decoder_state(g, vocab, embed, hidden)
    args = (torch.randn(batch, hidden, generator=g), torch.randn(batch, num_steps, hidden, generator=g),
            lens, max_len)
    return Call(init_args=(vocab, embed, hidden), init_seed=0, state_dict=state, method="greedy",
                args=args, kwargs=kwargs)


def _greedy_small(seed):
    g = _gen(seed)
    return [_greedy_call(g, 3, 5, 7, 4, 6, 6, torch.tensor([5, 2, 4]))]


def _greedy_bos(seed):
    g = _gen(seed)
    return [_greedy_call(g, 2, 4, 9, 3, 5, 5, torch.tensor([4, 3]), bos=4)]


def _greedy_random(seed):
    g = _gen(seed)
    batch, num_steps, vocab = _randint(g, 2, 5), _randint(g, 3, 8), _randint(g, 5, 12)
    embed, hidden, max_len = _randint(g, 2, 6), _randint(g, 3, 8), _randint(g, 4, 9)
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g)
    lens[0] = num_steps
    return [_greedy_call(g, batch, num_steps, vocab, embed, hidden, max_len, lens,
                         bos=_randint(g, 0, vocab - 1))]


register(Exercise(
    label="ch07_ex3", title="Greedy decoding that returns the attention weights", name="GreedyDecoder",
    reference=GreedyDecoder, kind="class", points=2,
    checks=[
        Check("3 sequences, 6 output steps", _greedy_small, seed=0,
              hint="this check compares the tokens and the weights of every step: look at what each step "
                   "is fed (token and state) and at what you record."),
        Check("a different bos token", _greedy_bos, seed=1,
              hint="this check passes bos=4 and compares the tokens and the weights of every step; the "
                   "reason above names the first that differs."),
        Check("random sizes and bos (hidden)", _greedy_random, public=False,
              hint="check the loop for any sizes, max_len and bos."),
    ],
    mistakes=[
        Mistake("bos fed at every step",
                "every step was fed the bos token: from the second step on, feed the token the model "
                "predicted at the step before.", _GreedyAlwaysBos),
        Mistake("state not carried",
                "every step started from h0: carry the hidden state returned by step to the next step.",
                _GreedyStateReset),
        Mistake("input tokens recorded",
                "your tokens are shifted by one: record the token predicted at each step (the argmax of "
                "its logits), not the token fed into it.", _GreedyRecordsInput),
        Mistake("weights stacked on the wrong axis",
                "the weights must have shape (batch, max_len, num_steps): one row per output step.",
                _GreedyWeightsTransposed),
    ],
    alternatives=[
        Alternative("preallocated", "empty output tensors filled in place, keys computed once and passed "
                    "to step, max(...).indices", _GreedyPreallocated),
        Alternative("recursive", "a recursion over the remaining steps, torch.cat", _GreedyRecursive),
        Alternative("one sequence at a time", "a batch of one per sequence, Python ints, stacked at the end",
                    _GreedyOneSequence),
    ],
))


# ======================================================= ch07_ex4 hard_alignment

def _check_weights(weights):
    if not isinstance(weights, torch.Tensor) or weights.dim() != 2 or 0 in weights.shape:
        shape = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"weights must be a non-empty 2-D tensor (num_outputs, num_inputs), got {shape}")


def hard_alignment(weights):
    """(argmax input position per output step, fraction of steps that do not move backwards)."""
    _check_weights(weights)
    positions = weights.argmax(dim=-1)
    if positions.numel() < 2:
        return positions, 1.0
    return positions, (positions[1:] >= positions[:-1]).double().mean().item()


def _ha_outputs_axis(weights):
    _check_weights(weights)
    positions = weights.argmax(dim=0)
    if positions.numel() < 2:
        return positions, 1.0
    return positions, (positions[1:] >= positions[:-1]).double().mean().item()


def _ha_strict(weights):
    _check_weights(weights)
    positions = weights.argmax(dim=-1)
    if positions.numel() < 2:
        return positions, 1.0
    return positions, (positions[1:] > positions[:-1]).double().mean().item()


def _ha_per_output(weights):
    _check_weights(weights)
    positions = weights.argmax(dim=-1)
    if positions.numel() < 2:
        return positions, 1.0
    return positions, (positions[1:] >= positions[:-1]).double().sum().item() / positions.numel()


def _ha_loops(weights):
    """Pure Python loops over the rows and the pairs."""
    if not torch.is_tensor(weights) or weights.ndim != 2 or weights.numel() == 0:
        raise ValueError(f"weights must be 2-D and non-empty, got shape "
                         f"{list(weights.shape) if torch.is_tensor(weights) else None}")
    rows = weights.tolist()
    best = [max(range(len(row)), key=lambda j: (row[j], -j)) for row in rows]
    pairs = list(zip(best, best[1:]))
    score = 1.0 if not pairs else sum(b >= a for a, b in pairs) / len(pairs)
    return torch.tensor(best, dtype=torch.long), score


def _ha_max_indices(weights):
    """torch.max(...).indices and a count of the backward moves."""
    if weights.dim() != 2 or min(weights.shape) == 0:
        raise ValueError(f"weights: expected (num_outputs, num_inputs), both positive; got {weights.shape}")
    positions = torch.max(weights, dim=1).indices
    backward = int((torch.diff(positions) < 0).sum())
    pairs = positions.shape[0] - 1
    return positions, float(1 - backward / pairs) if pairs else 1.0


def _ha_sorted_pairs(weights):
    """Positions from a descending sort; the pairs compared with unfold."""
    if weights.dim() != 2 or weights.size(0) < 1 or weights.size(1) < 1:
        raise ValueError("hard_alignment needs 2-D weights with at least one row and one column, "
                         f"got weights with shape {tuple(weights.shape)}")
    positions = weights.sort(dim=1, descending=True, stable=True).indices[:, 0].long()
    if len(positions) == 1:
        return positions, 1.0
    windows = positions.unfold(0, 2, 1)
    return positions, torch.mean((windows[:, 1] >= windows[:, 0]).to(torch.float64)).item()


def _ha_matrix(g, num_outputs, num_inputs, path):
    """Weights whose peak in row i is at input path[i], plus noise."""
    weights = torch.rand(num_outputs, num_inputs, generator=g) * 0.2
    weights[torch.arange(num_outputs), torch.tensor(path)] += 1.0
    return weights / weights.sum(dim=-1, keepdim=True)


def _ha_diagonal_ish(seed):
    g = _gen(seed)
    # Non-decreasing with a repeat and one jump back: strict and >= comparisons differ.
    return [Call(args=(_ha_matrix(g, 6, 9, [0, 2, 2, 5, 3, 8]),))]


def _ha_reordering(seed):
    g = _gen(seed)
    # Like a date: year first (end of the input), then month, then day (start of the input).
    return [Call(args=(_ha_matrix(g, 5, 7, [6, 6, 3, 0, 1]),)), Call(args=(_ha_matrix(g, 1, 4, [2]),))]


def _ha_bad(seed):
    g = _gen(seed)
    return [Call(args=(torch.rand(2, 3, 4, generator=g),)), Call(args=(torch.rand(5, generator=g),)),
            Call(args=(torch.rand(0, 4, generator=g),))]


def _ha_score_type(seed):
    g = _gen(seed)
    return [Call(args=(_ha_matrix(g, 4, 5, [0, 1, 1, 3]),)), Call(args=(_ha_matrix(g, 1, 3, [1]),))]


def _score_is_float(got, want, calls):
    for g in got:
        if g["status"] != "ok":
            return f"raised {g['error_type']}: {g['message'][:300]}"
        value = g["value"]
        items = value.get("__seq__") if isinstance(value, dict) else None
        if not items or len(items) != 2:
            return "the result is not a pair (positions, monotonicity)"
        if type(items[1]) is not float:
            kind = "a tensor" if isinstance(items[1], torch.Tensor) else type(items[1]).__name__
            return f"monotonicity is {kind}, expected a Python float"
    return None


def _ha_random(seed):
    g = _gen(seed)
    num_outputs, num_inputs = _randint(g, 3, 12), _randint(g, 3, 15)
    path = torch.randint(0, num_inputs, (num_outputs,), generator=g).tolist()
    path[1] = path[0]  # one repeated position at least
    return [Call(args=(_ha_matrix(g, num_outputs, num_inputs, path),)),
            Call(args=(torch.softmax(3 * torch.randn(num_outputs, num_inputs, generator=g,
                                                     dtype=torch.float64), dim=-1),))]


register(Exercise(
    label="ch07_ex4", title="Reading a hard alignment off the attention weights", name="hard_alignment",
    reference=hard_alignment, points=1,
    checks=[
        Check("a mostly monotone alignment with one repeat and one step back", _ha_diagonal_ish, seed=0,
              hint="this check compares the positions (an int64 tensor, one per output step) and the score "
                   "on a path 0, 2, 2, 5, 3, 8; the reason above says which differs."),
        Check("a reordering alignment (like year-month-day from day-month-year), and a single row",
              _ha_reordering, seed=1,
              hint="this check has a path that jumps back and a matrix with one row; the reason above says "
                   "which result differs."),
        Check("the score is a Python float", _ha_score_type, seed=4, compare=_score_is_float, weight=0.5,
              hint="the contract asks for monotonicity as a Python float (also 1.0 for a single row): "
                   "convert a tensor or a NumPy number with float(...)."),
        Check("weights that are not a non-empty 2-D tensor raise ValueError naming weights", _ha_bad,
              seed=2, must_mention=["weights"],
              hint="3-D, 1-D and empty inputs must raise ValueError whose message names weights."),
        Check("random alignments (hidden)", _ha_random, public=False,
              hint="check the positions and the score for any sizes."),
    ],
    mistakes=[
        Mistake("argmax over the outputs axis",
                "you took the argmax over the output steps (rows); each output step's position is the "
                "argmax over the input positions, the last axis.", _ha_outputs_axis),
        Mistake("strictly increasing",
                "a pair that stays on the same input position counts as monotone too (it does not move "
                "backwards); you counted only strict increases.", _ha_strict),
        Mistake("divided by num_outputs",
                "there are num_outputs - 1 consecutive pairs; you divided by num_outputs.", _ha_per_output),
    ],
    alternatives=[
        Alternative("Python loops", "lists, max with a key, zip over pairs", _ha_loops),
        Alternative("max indices", "torch.max(...).indices, 1 - share of backward moves, torch.Size in the "
                    "message", _ha_max_indices),
        Alternative("sort and unfold", "first index of a stable descending sort, pairs from unfold",
                    _ha_sorted_pairs),
    ],
))


# ======================================================= ch07_ex5 BidirectionalEncoder

def _check_src_lens(src, src_lens):
    num_steps = src.shape[1]
    if src_lens.numel() and (int(src_lens.min()) < 1 or int(src_lens.max()) > num_steps):
        raise ValueError(f"src_lens must lie between 1 and num_steps={num_steps}, got src_lens={src_lens.tolist()}")


class BidirectionalEncoder(nn.Module):
    """Embedding + bidirectional GRU over a padded batch; each direction sees only the
    sequence's own characters, and the padding positions are zeros."""

    def __init__(self, vocab_size, embed_size, num_hiddens):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size, num_hiddens, batch_first=True, bidirectional=True)

    def forward(self, src, src_lens):
        _check_src_lens(src, src_lens)
        packed = pack_padded_sequence(self.embedding(src), src_lens.cpu(), batch_first=True,
                                      enforce_sorted=False)
        outputs, _ = self.rnn(packed)
        return pad_packed_sequence(outputs, batch_first=True, total_length=src.shape[1])[0]


class _BiPaddingRead(BidirectionalEncoder):
    """The padded batch straight into the GRU: the backward direction starts on the padding."""

    def forward(self, src, src_lens):
        _check_src_lens(src, src_lens)
        outputs, _ = self.rnn(self.embedding(src))
        return outputs * _steps_mask(src_lens, src.shape[1]).unsqueeze(-1)


class _BiPaddingKept(BidirectionalEncoder):
    """Right at the valid positions, but the padding positions keep what a pass over the
    padded batch left there."""

    def forward(self, src, src_lens):
        right = super().forward(src, src_lens)
        raw, _ = self.rnn(self.embedding(src))
        return torch.where(_steps_mask(src_lens, src.shape[1]).unsqueeze(-1), right, raw)


class _BiNoTotalLength(BidirectionalEncoder):
    def forward(self, src, src_lens):
        _check_src_lens(src, src_lens)
        packed = pack_padded_sequence(self.embedding(src), src_lens.cpu(), batch_first=True,
                                      enforce_sorted=False)
        return pad_packed_sequence(self.rnn(packed)[0], batch_first=True)[0]


class _BiDirectionsSwapped(BidirectionalEncoder):
    def forward(self, src, src_lens):
        outputs = super().forward(src, src_lens)
        h = outputs.shape[-1] // 2
        return torch.cat([outputs[..., h:], outputs[..., :h]], dim=-1)


def _reverse_valid(x, lens):
    """Reverse the first lens[b] steps of each sequence b, leave the padding in place."""
    steps = torch.arange(x.shape[1])[None, :]
    index = torch.where(steps < lens[:, None], lens[:, None] - 1 - steps, steps)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


def _one_direction(rnn: nn.GRU, suffix: str) -> nn.GRU:
    """A one-directional GRU that shares the given direction's parameters (no copy)."""
    single = nn.GRU(rnn.input_size, rnn.hidden_size, batch_first=True)
    for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
        setattr(single, name, getattr(rnn, name + suffix))
    return single


class _BiNotReversedBack(BidirectionalEncoder):
    """Reverses each sequence for the backward direction but forgets to reverse its outputs back."""

    def forward(self, src, src_lens):
        _check_src_lens(src, src_lens)
        x = self.embedding(src)
        forward_out, _ = _one_direction(self.rnn, "")(x)
        backward_out, _ = _one_direction(self.rnn, "_reverse")(_reverse_valid(x, src_lens))
        mask = _steps_mask(src_lens, src.shape[1]).unsqueeze(-1)
        return torch.cat([forward_out, backward_out], dim=-1) * mask


class _BiOneAtATime(nn.Module):
    """Each sequence run alone, cut to its own length (no padding at all), then padded with zeros."""

    def __init__(self, vocab_size, embed_size, num_hiddens):
        super().__init__()
        self.rnn = nn.GRU(embed_size, num_hiddens, batch_first=True, bidirectional=True)
        self.embedding = nn.Embedding(vocab_size, embed_size, padding_idx=0)

    def forward(self, src, src_lens):
        if (src_lens < 1).any() or (src_lens > src.shape[1]).any():
            raise ValueError(f"every entry of src_lens must be in 1..{src.shape[1]}; got {src_lens}")
        out = torch.zeros(src.shape[0], src.shape[1], 2 * self.rnn.hidden_size)
        for b, n in enumerate(src_lens.tolist()):
            out[b, :n] = self.rnn(self.embedding(src[b:b + 1, :n]))[0][0]
        return out


class _BiReversedByIndex(BidirectionalEncoder):
    """Two one-directional passes sharing the parameters; the backward one on each sequence
    reversed within its length, its outputs reversed back."""

    def forward(self, src, src_lens):
        _check_src_lens(src, src_lens)
        x = self.embedding(src)
        ahead, _ = _one_direction(self.rnn, "")(x)
        back, _ = _one_direction(self.rnn, "_reverse")(_reverse_valid(x, src_lens))
        both = torch.cat([ahead, _reverse_valid(back, src_lens)], dim=-1)
        return both.masked_fill(~_steps_mask(src_lens, src.shape[1]).unsqueeze(-1), 0.0)


class _BiByHand(nn.Module):
    """The GRU equations, one time step at a time in both directions; a state only changes
    at the sequence's valid steps (so the backward state stays 0 over the padding)."""

    def __init__(self, vocab_size, embed_size, num_hiddens):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.rnn = nn.GRU(embed_size, num_hiddens, batch_first=True, bidirectional=True)

    def _cell(self, x, h, suffix):
        p = {n: getattr(self.rnn, n + "_l0" + suffix) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
        i_r, i_z, i_n = (x @ p["weight_ih"].T + p["bias_ih"]).chunk(3, -1)
        h_r, h_z, h_n = (h @ p["weight_hh"].T + p["bias_hh"]).chunk(3, -1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        return (1 - z) * torch.tanh(i_n + r * h_n) + z * h

    def forward(self, src, src_lens):
        batch, T = src.shape
        if not bool(((src_lens >= 1) & (src_lens <= T)).all()):
            raise ValueError(f"src_lens out of range 1..{T}: {src_lens.tolist()}")
        x = self.embedding(src)
        H = self.rnn.hidden_size
        valid = (torch.arange(T)[None, :] < src_lens[:, None]).unsqueeze(-1)      # (batch, T, 1)
        fwd, bwd = [None] * T, [None] * T
        h = x.new_zeros(batch, H)
        for t in range(T):
            h = torch.where(valid[:, t], self._cell(x[:, t], h, ""), h)
            fwd[t] = h
        h = x.new_zeros(batch, H)
        for t in reversed(range(T)):
            h = torch.where(valid[:, t], self._cell(x[:, t], h, "_reverse"), h)
            bwd[t] = h
        return torch.cat([torch.stack(fwd, 1), torch.stack(bwd, 1)], -1) * valid


def _bi_state(g, vocab_size, embed_size, num_hiddens):
    state = {"embedding.weight": torch.randn(vocab_size, embed_size, generator=g)}
    for suffix in ("", "_reverse"):
        for name, shape in (("weight_ih_l0", (3 * num_hiddens, embed_size)),
                            ("weight_hh_l0", (3 * num_hiddens, num_hiddens)),
                            ("bias_ih_l0", (3 * num_hiddens,)), ("bias_hh_l0", (3 * num_hiddens,))):
            state[f"rnn.{name}{suffix}"] = 0.5 * torch.randn(shape, generator=g)
    return state


def _bi_call(g, vocab, embed, hidden, lens, num_steps):
    lens = torch.tensor(lens)
    src = torch.randint(1, vocab, (len(lens), num_steps), generator=g)
    src[~_steps_mask(lens, num_steps)] = 0       # padding index 0 past each length
    return Call(init_args=(vocab, embed, hidden), init_seed=0, state_dict=_bi_state(g, vocab, embed, hidden),
                args=(src, lens))


def _bi_padded(seed):
    g = _gen(seed)
    return [_bi_call(g, 9, 3, 4, [5, 2, 4], 5)]


def _bi_no_padding(seed):
    g = _gen(seed)
    return [_bi_call(g, 7, 2, 3, [4, 4], 4), _bi_call(g, 7, 2, 3, [1], 1)]


def _bi_all_short(seed):
    g = _gen(seed)
    return [_bi_call(g, 8, 3, 2, [2, 3], 5)]


def _bi_bad(seed):
    g = _gen(seed)
    call = _bi_call(g, 6, 2, 3, [3, 2], 3)
    src = call.args[0]
    return [Call(init_args=call.init_args, init_seed=0, state_dict=call.state_dict, args=(src, torch.tensor([0, 3]))),
            Call(init_args=call.init_args, init_seed=0, state_dict=call.state_dict, args=(src, torch.tensor([3, 4])))]


def _bi_random(seed):
    g = _gen(seed)
    batch, num_steps = _randint(g, 2, 6), _randint(g, 2, 9)
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g).tolist()
    lens[0], lens[-1] = num_steps, 1
    vocab, embed, hidden = _randint(g, 4, 12), _randint(g, 2, 5), _randint(g, 2, 6)
    shorter = torch.randint(1, num_steps, (2,), generator=g).tolist()     # both below num_steps
    return [_bi_call(g, vocab, embed, hidden, lens, num_steps),
            _bi_call(g, vocab, embed, hidden, shorter, num_steps)]


register(Exercise(
    label="ch07_ex5", title="A bidirectional encoder for a padded batch", name="BidirectionalEncoder",
    reference=BidirectionalEncoder, kind="class", points=2,
    checks=[
        Check("3 sequences of lengths 5, 2 and 4 padded to 5 steps", _bi_padded, seed=0,
              hint="this check has padding: compare, at each valid position, the forward half and the "
                   "backward half separately, and look at the padding positions."),
        Check("sequences without padding, and a sequence of one character", _bi_no_padding, seed=1,
              hint="without padding the output is the plain bidirectional GRU's: check the order of the "
                   "two halves and the positions of the backward states."),
        Check("every sequence shorter than the padded width (lengths 2 and 3 of 5)", _bi_all_short, seed=3,
              hint="this check's batch is wider than its longest sequence; the output keeps num_steps "
                   "positions. The reason above says what differs first."),
        Check("a length of 0 or above num_steps raises ValueError naming src_lens", _bi_bad, seed=2,
              must_mention=["src_lens"], weight=0.5,
              hint="lengths 0 and num_steps + 1 must raise ValueError whose message names src_lens."),
        Check("random sizes and lengths (hidden)", _bi_random, public=False,
              hint="check both directions and the padding for any sizes."),
    ],
    mistakes=[
        Mistake("backward direction reads the padding",
                "at the valid positions of the shorter sequences the backward half is wrong: a GRU run over "
                "the padded batch starts its backward pass on the padding. Each sequence's backward pass "
                "must start at its own last character.", _BiPaddingRead),
        Mistake("padding positions not zero",
                "the valid positions are right, but the padding positions must hold zeros.", _BiPaddingKept),
        Mistake("output cut to the longest sequence",
                "the output has as many positions as the longest sequence, not num_steps (src.shape[1]): "
                "when every sequence is shorter than the batch, keep the full width (pad_packed_sequence "
                "has an argument for it).", _BiNoTotalLength),
        Mistake("directions swapped",
                "the two halves are in the wrong order: the forward states come first, then the backward "
                "states.", _BiDirectionsSwapped),
        Mistake("backward outputs not reversed back",
                "the backward half is in reversed order: after running it on the reversed sequence, put "
                "its outputs back in the order of the source.", _BiNotReversedBack),
    ],
    alternatives=[
        Alternative("one sequence at a time", "each sequence cut to its length and run alone, zeros "
                    "elsewhere; padding_idx set; parameters created in another order", _BiOneAtATime),
        Alternative("reversal by index", "two one-directional passes sharing the parameters, the backward "
                    "one on the sequences reversed within their lengths", _BiReversedByIndex),
        Alternative("GRU by hand", "the GRU equations per time step, torch.where keeps a state over the "
                    "padding", _BiByHand),
    ],
))
