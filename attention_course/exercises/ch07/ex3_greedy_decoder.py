"""ch07_ex3: Greedy decoding that returns the attention weights.

Complete the class `GreedyDecoder(AttentionDecoder)`, a subclass of the course's decoder
(`tr.AttentionDecoder`, imported in the setup cell), by writing its method
`greedy(h0, enc_outputs, valid_lens, max_len, bos=1)`. Use the inherited method
`self.step(prev_hidden, tokens, enc_outputs, valid_lens)`, which returns
`(logits (batch, vocab_size), hidden (batch, num_hiddens), weights (batch, num_steps))` for the
previous tokens `tokens` `(batch,)` (dtype `torch.long`).

Start from the state `h0` `(batch, num_hiddens)` with the token `bos` for every sequence, and
run exactly `max_len` steps; at every step, the next input token is the most likely token of that
step's logits, and the next state is the hidden state that `step` returned. Return
`(tokens, weights)`: `tokens` of shape `(batch, max_len)`, dtype `torch.long`, the predicted token
of every step, and `weights` of shape `(batch, max_len, num_steps)`, the attention weights of
every step. (Stopping at `<eos>` is left to whoever reads the tokens.)
"""
from __future__ import annotations

import torch

from ...registry import Alternative, Call, Check, Exercise, Mistake, register
from ...translation import AttentionDecoder
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


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


# Inputs of the public and hidden checks ---------------------------------------------------


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
    g = gen(seed)
    return [_greedy_call(g, 3, 5, 7, 4, 6, 6, torch.tensor([5, 2, 4]))]


def _greedy_bos(seed):
    g = gen(seed)
    return [_greedy_call(g, 2, 4, 9, 3, 5, 5, torch.tensor([4, 3]), bos=4)]


def _greedy_random(seed):
    g = gen(seed)
    batch, num_steps, vocab = randint(g, 2, 5), randint(g, 3, 8), randint(g, 5, 12)
    embed, hidden, max_len = randint(g, 2, 6), randint(g, 3, 8), randint(g, 4, 9)
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g)
    lens[0] = num_steps
    return [_greedy_call(g, batch, num_steps, vocab, embed, hidden, max_len, lens,
                         bos=randint(g, 0, vocab - 1))]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("bos fed at every step",
               "every step was fed the bos token: from the second step on, feed the token the model "
               "predicted at the step before.")
class _GreedyAlwaysBos(AttentionDecoder):
    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        start = torch.full((h0.shape[0],), bos, dtype=torch.long)
        hidden, out_tokens, out_weights = h0, [], []
        for _ in range(max_len):
            logits, hidden, weights = self.step(hidden, start, enc_outputs, valid_lens)
            out_tokens.append(logits.argmax(dim=-1))
            out_weights.append(weights)
        return torch.stack(out_tokens, dim=1), torch.stack(out_weights, dim=1)


@mistakes.keep("state not carried",
               "every step started from h0: carry the hidden state returned by step to the next step.")
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


@mistakes.keep("input tokens recorded",
               "your tokens are shifted by one: record the token predicted at each step (the argmax of "
               "its logits), not the token fed into it.")
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


@mistakes.keep("weights stacked on the wrong axis",
               "the weights must have shape (batch, max_len, num_steps): one row per output step.")
class _GreedyWeightsTransposed(GreedyDecoder):
    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        tokens, weights = super().greedy(h0, enc_outputs, valid_lens, max_len, bos)
        return tokens, weights.transpose(1, 2)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("preallocated",
                   "empty output tensors filled in place, keys computed once and passed "
   "to step, max(...).indices")
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


@alternatives.keep("recursive",
                   "a recursion over the remaining steps, torch.cat")
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


@alternatives.keep("one sequence at a time",
                   "a batch of one per sequence, Python ints, stacked at the end")
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


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch07_ex3", title="Greedy decoding that returns the attention weights", name="GreedyDecoder",
    reference=GreedyDecoder, kind="class", points=2,
    checks=[
        Check("3 sequences, 6 output steps", _greedy_small, seed=0,
              hint="this check compares the tokens and the weights of every step: what each step "
                   "is fed (token and state) and what is recorded."),
        Check("a different bos token", _greedy_bos, seed=1,
              hint="this check passes bos=4 and compares the tokens and the weights of every step; the "
                   "reason above names the first that differs."),
        Check("random sizes and bos (hidden)", _greedy_random, public=False,
              hint="check the loop for any sizes, max_len and bos."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
