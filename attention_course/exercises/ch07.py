"""Chapter 7 exercises: Bahdanau attention in a GRU encoder-decoder.

ch07_ex1  additive_attention_weights(query, keys, W_q, W_k, w_v, valid_lens) -> (batch, num_steps)
ch07_ex2  AttentionDecoderStep(embed_size, num_hiddens)  (nn.Module; forward -> hidden, context, weights)
ch07_ex3  GreedyDecoder(AttentionDecoder).greedy(h0, enc_outputs, valid_lens, max_len) -> tokens, weights
ch07_ex4  hard_alignment(weights) -> (positions, monotonicity)
ch07_ex5  final_states(enc_outputs, valid_lens) -> (batch, num_hiddens)

The query of the attention is always the decoder's **previous** hidden state
``s_{i-1}``, as in Bahdanau et al. (2014). ``GreedyDecoder`` subclasses the course's
:class:`attention_course.translation.AttentionDecoder`, so the check builds it with
``init_args=(vocab_size, embed_size, num_hiddens)`` and loads a given state dict; the
student writes only the decoding loop around the given ``step``.
"""
from __future__ import annotations

import torch
from torch import nn

from ..registry import Call, Check, Exercise, Mistake, register
from ..translation import AttentionDecoder


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randint(g, low, high) -> int:
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _steps_mask(valid_lens, num_steps):
    return torch.arange(num_steps)[None, :] < valid_lens[:, None]


# ======================================================= ch07_ex1 additive_attention_weights

def _validate_lens(keys, valid_lens):
    num_steps = keys.shape[1]
    if valid_lens.numel() and (int(valid_lens.min()) < 1 or int(valid_lens.max()) > num_steps):
        raise ValueError(f"valid_lens must lie between 1 and num_steps={num_steps}, "
                         f"got valid_lens={valid_lens.tolist()}")


def _aaw_scores(query, keys, W_q, W_k, w_v, squash=torch.tanh):
    return squash((query @ W_q.T).unsqueeze(1) + keys @ W_k.T) @ w_v


def additive_attention_weights(query, keys, W_q, W_k, w_v, valid_lens):
    """Weights (batch, num_steps) of additive attention for one decoder query per sequence."""
    _validate_lens(keys, valid_lens)
    scores = _aaw_scores(query, keys, W_q, W_k, w_v)
    scores = scores.masked_fill(~_steps_mask(valid_lens, keys.shape[1]), float("-inf"))
    return torch.softmax(scores, dim=-1)


def _aaw_no_mask(query, keys, W_q, W_k, w_v, valid_lens):
    _validate_lens(keys, valid_lens)
    return torch.softmax(_aaw_scores(query, keys, W_q, W_k, w_v), dim=-1)


def _aaw_batch_axis(query, keys, W_q, W_k, w_v, valid_lens):
    _validate_lens(keys, valid_lens)
    scores = _aaw_scores(query, keys, W_q, W_k, w_v)
    mask = _steps_mask(valid_lens, keys.shape[1])
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=0)
    return torch.nan_to_num(weights, nan=0.0)


def _aaw_no_tanh(query, keys, W_q, W_k, w_v, valid_lens):
    _validate_lens(keys, valid_lens)
    scores = _aaw_scores(query, keys, W_q, W_k, w_v, squash=lambda x: x)
    return torch.softmax(scores.masked_fill(~_steps_mask(valid_lens, keys.shape[1]), float("-inf")), dim=-1)


def _aaw_zeroed_after(query, keys, W_q, W_k, w_v, valid_lens):
    _validate_lens(keys, valid_lens)
    weights = torch.softmax(_aaw_scores(query, keys, W_q, W_k, w_v), dim=-1)
    return weights * _steps_mask(valid_lens, keys.shape[1])


def _aaw_inputs(g, batch, num_steps, query_size, key_size, num_hiddens, dtype=torch.float32):
    return (torch.randn(batch, query_size, generator=g, dtype=dtype),
            torch.randn(batch, num_steps, key_size, generator=g, dtype=dtype),
            torch.randn(num_hiddens, query_size, generator=g, dtype=dtype),
            torch.randn(num_hiddens, key_size, generator=g, dtype=dtype),
            torch.randn(num_hiddens, generator=g, dtype=dtype))


def _aaw_padded(seed):
    g = _gen(seed)
    return [Call(args=_aaw_inputs(g, 2, 5, 4, 3, 6) + (torch.tensor([5, 3]),))]


def _aaw_batch_of_three(seed):
    g = _gen(seed)
    return [Call(args=_aaw_inputs(g, 3, 4, 3, 5, 4) + (torch.tensor([1, 4, 2]),))]


def _aaw_bad(seed):
    g = _gen(seed)
    inputs = _aaw_inputs(g, 2, 4, 3, 3, 5)
    return [Call(args=inputs + (torch.tensor([0, 4]),)), Call(args=inputs + (torch.tensor([2, 5]),))]


def _aaw_random(seed):
    g = _gen(seed)
    batch, num_steps = _randint(g, 2, 6), _randint(g, 3, 9)
    query_size, key_size, num_hiddens = _randint(g, 2, 8), _randint(g, 2, 8), _randint(g, 2, 10)
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g)
    lens[0] = num_steps
    lens[-1] = 1
    return [Call(args=_aaw_inputs(g, batch, num_steps, query_size, key_size, num_hiddens) + (lens,))]


def _aaw_float64(seed):
    g = _gen(seed)
    return [Call(args=_aaw_inputs(g, 3, 6, 5, 4, 7, dtype=torch.float64) + (torch.tensor([6, 2, 4]),))]


register(Exercise(
    label="ch07_ex1", title="Additive attention weights for one decoder step",
    name="additive_attention_weights", reference=additive_attention_weights, points=2,
    checks=[
        Check("2 sequences of 5 encoder steps, valid lengths 5 and 3", _aaw_padded, seed=0,
              hint="score each encoder step with w_v . tanh(W_q q + W_k k), hide the steps at or "
                   "after valid_lens, then normalise over the encoder steps."),
        Check("3 sequences with valid lengths 1, 4 and 2 (query and key sizes differ)",
              _aaw_batch_of_three, seed=1,
              hint="W_q maps the query (query_size) and W_k the keys (key_size) to num_hiddens; "
                   "broadcast the projected query over the encoder steps."),
        Check("a valid length of 0 or above num_steps raises ValueError naming valid_lens", _aaw_bad,
              seed=2, must_mention=["valid_lens"],
              hint="check 1 <= valid_lens <= num_steps before computing anything and name valid_lens "
                   "in the message."),
        Check("random sizes and lengths (hidden)", _aaw_random, public=False,
              hint="check the scores, the masking and the softmax for any sizes."),
        Check("float64 inputs keep their dtype (hidden)", _aaw_float64, public=False,
              hint="compute in the dtype of the inputs; do not create float32 tensors on the way."),
    ],
    mistakes=[
        Mistake("padding not masked",
                "the padded encoder steps (at or after valid_lens) received weight: they must get "
                "exactly 0, so hide their scores before the softmax.", _aaw_no_mask),
        Mistake("softmax over the batch axis",
                "your weights are normalised over the batch axis; each sequence's weights must sum to 1 "
                "over its encoder steps (the last axis).", _aaw_batch_axis),
        Mistake("no tanh",
                "the scores are linear in the projected query and key: additive attention squashes "
                "their sum with tanh before w_v.", _aaw_no_tanh),
        Mistake("padding zeroed after the softmax",
                "the padded steps were zeroed after the softmax, so the remaining weights no longer sum "
                "to 1; hide the padded scores before normalising.", _aaw_zeroed_after),
    ],
))


# ======================================================= ch07_ex2 AttentionDecoderStep

class AttentionDecoderStep(nn.Module):
    """One step of the attention decoder: (prev_hidden, embedded, enc_outputs, valid_lens)
    -> (hidden, context, weights)."""

    def __init__(self, embed_size, num_hiddens):
        super().__init__()
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)

    def attend(self, query, enc_outputs, valid_lens, masked=True):
        features = torch.tanh(self.W_q(query).unsqueeze(1) + self.W_k(enc_outputs))
        scores = self.w_v(features).squeeze(-1)
        if masked:
            scores = scores.masked_fill(~_steps_mask(valid_lens, enc_outputs.shape[1]), float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.bmm(weights.unsqueeze(1), enc_outputs).squeeze(1), weights

    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens)
        hidden = self.cell(torch.cat([embedded, context], dim=-1), prev_hidden)
        return hidden, context, weights


class _StepSwapped(AttentionDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens)
        return self.cell(torch.cat([context, embedded], dim=-1), prev_hidden), context, weights


class _StepNoMask(AttentionDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens, masked=False)
        return self.cell(torch.cat([embedded, context], dim=-1), prev_hidden), context, weights


class _StepNoState(AttentionDecoderStep):
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens)
        return self.cell(torch.cat([embedded, context], dim=-1)), context, weights


class _StepEmbeddingQuery(AttentionDecoderStep):
    # Only runs when embed_size == num_hiddens (else W_q cannot read the embedding); with
    # other sizes it behaves like the reference, so it is wrong in exactly one way.
    def forward(self, prev_hidden, embedded, enc_outputs, valid_lens):
        query = embedded if embedded.shape[-1] == prev_hidden.shape[-1] else prev_hidden
        context, weights = self.attend(query, enc_outputs, valid_lens)
        return self.cell(torch.cat([embedded, context], dim=-1), prev_hidden), context, weights


def _step_state(g, embed_size, num_hiddens):
    h = num_hiddens
    return {"W_q.weight": 0.5 * torch.randn(h, h, generator=g),
            "W_k.weight": 0.5 * torch.randn(h, h, generator=g),
            "w_v.weight": torch.randn(1, h, generator=g),
            "cell.weight_ih": 0.4 * torch.randn(3 * h, embed_size + h, generator=g),
            "cell.weight_hh": 0.4 * torch.randn(3 * h, h, generator=g),
            "cell.bias_ih": 0.1 * torch.randn(3 * h, generator=g),
            "cell.bias_hh": 0.1 * torch.randn(3 * h, generator=g)}


def _step_inputs(g, batch, num_steps, embed_size, num_hiddens, lens):
    return (torch.randn(batch, num_hiddens, generator=g), torch.randn(batch, embed_size, generator=g),
            torch.randn(batch, num_steps, num_hiddens, generator=g), lens)


def _step_params(seed):
    g = _gen(seed)
    return [Call(init_args=(3, 5), init_seed=seed, args=_step_inputs(g, 2, 4, 3, 5, torch.tensor([4, 2])),
                 report=("param_shapes",))]


def _step_padded(seed):
    g = _gen(seed)
    state = _step_state(g, 3, 5)
    return [Call(init_args=(3, 5), init_seed=0, state_dict=state,
                 args=_step_inputs(g, 3, 6, 3, 5, torch.tensor([6, 2, 4])))]


def _step_same_sizes(seed):
    g = _gen(seed)
    state = _step_state(g, 4, 4)
    return [Call(init_args=(4, 4), init_seed=0, state_dict=state,
                 args=_step_inputs(g, 2, 5, 4, 4, torch.tensor([3, 5])))]


def _step_random(seed):
    g = _gen(seed)
    batch, num_steps, embed_size, num_hiddens = (_randint(g, 2, 5), _randint(g, 3, 8),
                                                 _randint(g, 2, 6), _randint(g, 2, 7))
    state = _step_state(g, embed_size, num_hiddens)
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g)
    lens[0] = 1
    init = (embed_size, num_hiddens)
    return [Call(init_args=init, init_seed=1, state_dict=state,
                 args=_step_inputs(g, batch, num_steps, embed_size, num_hiddens, lens), grads_of=(0, 1, 2))]


def _same_parameters(got, want, calls):
    for g, w in zip(got, want):
        if g["status"] != "ok":
            return f"raised {g['error_type']}: {g['message'][:300]}"
        mine, theirs = g.get("extras", {}).get("param_shapes"), w["extras"]["param_shapes"]
        if mine != theirs:
            return f"the parameters (name: shape) are {mine}, expected {theirs}"
    return None


register(Exercise(
    label="ch07_ex2", title="One decoder step with attention", name="AttentionDecoderStep",
    reference=AttentionDecoderStep, kind="class", points=2,
    checks=[
        Check("parameters W_q, W_k, w_v (no biases) and cell with the right shapes", _step_params, seed=0,
              compare=_same_parameters,
              hint="create exactly W_q and W_k (num_hiddens -> num_hiddens), w_v (num_hiddens -> 1), all "
                   "without bias, and cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)."),
        Check("3 sequences of 6 encoder steps with padding (embed_size 3, num_hiddens 5)", _step_padded,
              seed=1, hint="query = prev_hidden; weights over the valid encoder steps; context = weighted "
                            "sum of enc_outputs; then the GRU cell on [embedded; context] and prev_hidden."),
        Check("embed_size equal to num_hiddens", _step_same_sizes, seed=2,
              hint="the query is the previous hidden state, not the embedding of the input token."),
        Check("random sizes, and gradients reach the inputs (hidden)", _step_random, public=False,
              hint="check every part of the step for any sizes; keep everything differentiable."),
    ],
    mistakes=[
        Mistake("context and embedding swapped",
                "the GRU cell's input must be the embedding followed by the context, [embedded; context], "
                "in that order.", _StepSwapped),
        Mistake("padding not masked",
                "the padded encoder steps (at or after valid_lens) received weight; hide their scores "
                "before the softmax.", _StepNoMask),
        Mistake("previous state not passed to the cell",
                "the GRU cell started from a zero state: pass prev_hidden to it as its hidden state.",
                _StepNoState),
        Mistake("embedding used as the query",
                "the query of the attention is the decoder's previous hidden state, not the embedding of "
                "the previous token.", _StepEmbeddingQuery),
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
              hint="start from h0 and the bos token; at every step call self.step, keep its new hidden "
                   "state, take the most likely token and feed it to the next step."),
        Check("a different bos token", _greedy_bos, seed=1,
              hint="the first input token of every sequence is bos (an argument), not a fixed index."),
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
              hint="positions[i] is the input position with the largest weight in row i; the score is the "
                   "fraction of the num_outputs - 1 consecutive pairs whose position does not decrease."),
        Check("a reordering alignment (like year-month-day from day-month-year), and a single row",
              _ha_reordering, seed=1,
              hint="one output row has no pair to compare: its score is 1.0 by the contract."),
        Check("weights that are not a non-empty 2-D tensor raise ValueError naming weights", _ha_bad,
              seed=2, must_mention=["weights"],
              hint="check weights.dim() == 2 and that both sizes are positive, and name weights in the message."),
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
))


# ======================================================= ch07_ex5 final_states

def final_states(enc_outputs, valid_lens):
    """The encoder state at each sequence's last valid step: (batch, num_hiddens)."""
    _validate_lens(enc_outputs, valid_lens)
    return enc_outputs[torch.arange(enc_outputs.shape[0]), valid_lens - 1]


def _fs_last_position(enc_outputs, valid_lens):
    _validate_lens(enc_outputs, valid_lens)
    return enc_outputs[:, -1]


def _fs_off_by_one(enc_outputs, valid_lens):
    _validate_lens(enc_outputs, valid_lens)
    index = torch.clamp(valid_lens, max=enc_outputs.shape[1] - 1)
    return enc_outputs[torch.arange(enc_outputs.shape[0]), index]


def _fs_mean(enc_outputs, valid_lens):
    _validate_lens(enc_outputs, valid_lens)
    mask = _steps_mask(valid_lens, enc_outputs.shape[1]).unsqueeze(-1)
    return (enc_outputs * mask).sum(dim=1) / valid_lens[:, None].to(enc_outputs.dtype)


def _fs_padded(seed):
    g = _gen(seed)
    return [Call(args=(torch.randn(3, 5, 4, generator=g), torch.tensor([5, 2, 3])))]


def _fs_bad(seed):
    g = _gen(seed)
    outputs = torch.randn(2, 4, 3, generator=g)
    return [Call(args=(outputs, torch.tensor([0, 4]))), Call(args=(outputs, torch.tensor([3, 6])))]


def _fs_random(seed):
    g = _gen(seed)
    batch, num_steps, hidden = _randint(g, 2, 7), _randint(g, 2, 10), _randint(g, 1, 6)
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g)
    lens[0], lens[-1] = 1, num_steps
    return [Call(args=(torch.randn(batch, num_steps, hidden, generator=g, dtype=torch.float64), lens))]


register(Exercise(
    label="ch07_ex5", title="The fixed-length summary of a padded batch", name="final_states",
    reference=final_states, points=1,
    checks=[
        Check("3 sequences of lengths 5, 2 and 3 padded to 5 steps", _fs_padded, seed=0,
              hint="sequence b's summary is its state after its last valid character, at position "
                   "valid_lens[b] - 1."),
        Check("a valid length of 0 or above num_steps raises ValueError naming valid_lens", _fs_bad, seed=1,
              must_mention=["valid_lens"],
              hint="check 1 <= valid_lens <= num_steps first and name valid_lens in the message."),
        Check("random sizes in float64 (hidden)", _fs_random, public=False,
              hint="pick one step per sequence, for any sizes and dtype."),
    ],
    mistakes=[
        Mistake("last position, padding included",
                "you took the state at the last position of the padded batch; for a shorter sequence that "
                "state has read padding. Take each sequence's own last valid step.", _fs_last_position),
        Mistake("one step too far",
                "off by one: a sequence of length n ends at position n - 1.", _fs_off_by_one),
        Mistake("average of the states",
                "you averaged the valid states; the summary the plain decoder gets is a single state, the "
                "one after the last valid character.", _fs_mean),
    ],
))
