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
every step. A sequence that predicts `<eos>` (index 2, `tr.Vocab.eos`) runs on like the others:
the loop neither stops nor pads, and the tokens and weights after its `<eos>` are the ones the
steps produce. (Stopping at `<eos>` is left to whoever reads the tokens.)
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from ...translation import AttentionDecoder, Vocab
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


def _rigged_state(g, vocab, num_modes, eos_steps):
    """A decoder whose next token depends only on the token fed and on the sequence's *mode*.

    Mode m follows a chain of distinct tokens from bos that predicts <eos> at step
    eos_steps[m] and goes on with other tokens after it; pad is never predicted. The
    embedding is one-hot; GRU unit (m, v) fires (tanh near +1) only when the token fed is v
    and the context's coordinate m is 1 (each sequence's encoder states carry the one-hot of
    its mode in their first num_modes coordinates, so every context does too); the update
    gate is shut, so the state is that pattern alone; the output layer maps unit (m, v) to
    the token after v in mode m's chain. The attention parameters stay random, so the
    weights still differ from step to step.
    """
    units, big = num_modes * vocab, 20.0
    hidden = units + 3                     # 3 more coordinates carry noise into the keys
    chains = []
    for eos_step in eos_steps:
        others = [v for v in range(3, vocab)]
        order = torch.randperm(len(others), generator=g).tolist()
        chain = [others[k] for k in order]
        chain.insert(eos_step, Vocab.eos)              # chain[t] is predicted at step t
        loop_to = randint(g, eos_step + 1, len(chain) - 1)
        nxt = {Vocab.bos: chain[0]}
        nxt.update({a: b for a, b in zip(chain, chain[1:])})
        nxt[chain[-1]] = chain[loop_to]                # the walk cycles, never back to pad
        chains.append(nxt)
    embed = vocab
    state = {"embedding.weight": torch.eye(vocab),
             "W_q.weight": 0.5 * torch.randn(hidden, hidden, generator=g),
             "W_k.weight": 0.5 * torch.randn(hidden, hidden, generator=g),
             "w_v.weight": torch.randn(1, hidden, generator=g)}
    weight_ih = torch.zeros(3 * hidden, embed + hidden)
    bias_ih = torch.zeros(3 * hidden)
    bias_ih[hidden:2 * hidden] = -30.0                 # update gate z ~ 0: the new state is n
    out_weight, out_bias = torch.zeros(vocab, 2 * hidden), torch.zeros(vocab)
    for m, nxt in enumerate(chains):
        for v in range(vocab):
            u = m * vocab + v
            weight_ih[2 * hidden + u, v] = big                 # the token fed is v ...
            weight_ih[2 * hidden + u, embed + m] = big         # ... and the mode is m
            bias_ih[2 * hidden + u] = -1.5 * big
            target = nxt.get(v, 3)                             # tokens off the chain: any non-pad
            out_weight[target, u] = 5.0                        # +5 when firing, -5 when not,
            out_bias[target] += 5.0                            # so the target's logit is 10, others 0
    state.update({"cell.weight_ih": weight_ih, "cell.weight_hh": torch.zeros(3 * hidden, hidden),
                  "cell.bias_ih": bias_ih, "cell.bias_hh": torch.zeros(3 * hidden),
                  "out.weight": out_weight, "out.bias": out_bias})
    return state, hidden


def _greedy_eos(seed):
    """Every sequence predicts <eos> before the last step: in the first batch at a step that
    depends on its mode (not the same step for all), in the second at one step for all."""
    g = gen(seed)
    return [_eos_call(g, same_step=False), _eos_call(g, same_step=True)]


def _eos_call(g, same_step):
    vocab, batch, num_steps, max_len = randint(g, 8, 11), randint(g, 3, 5), randint(g, 3, 7), randint(g, 6, 9)
    num_modes = 3
    # Three or more steps before the end (what is fed after <eos> then shows in the weights too),
    # and early enough in a chain of vocab - 2 tokens to be followed by two.
    last = min(max_len - 4, vocab - 4)
    eos_steps = [randint(g, 0, last) for _ in range(num_modes)]
    if same_step:
        # A loop that stops when every sequence predicts <eos> at once fails this batch.
        eos_steps = [eos_steps[0]] * num_modes
    elif len(set(eos_steps)) == 1:
        # ... and passes this one: some sequence predicts <eos> at another step.
        eos_steps[0] = (eos_steps[0] + 1) % (last + 1)
    state, hidden = _rigged_state(g, vocab, num_modes, eos_steps)
    modes = torch.arange(batch) % num_modes
    enc_outputs = torch.randn(batch, num_steps, hidden, generator=g)
    enc_outputs[:, :, :num_modes] = torch.nn.functional.one_hot(modes, num_modes)[:, None].float()
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g)
    return Call(init_args=(vocab, vocab, hidden), init_seed=0, state_dict=state, method="greedy",
                args=(torch.randn(batch, hidden, generator=g), enc_outputs, lens, max_len))


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


@mistakes.keep("argmax over the batch axis",
               "the next tokens came from an argmax over axis 0 of the logits, the batch axis: logits have "
               "shape (batch, vocab_size), so that argmax has shape (vocab_size,), one sequence per token of "
               "the vocabulary, while step expects tokens of shape (batch,). Take the most likely token of "
               "each sequence: the argmax over the vocabulary, the last axis.")
class _GreedyArgmaxOverBatch(AttentionDecoder):
    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        tokens = torch.full((h0.shape[0],), bos, dtype=torch.long)
        hidden, out_tokens, out_weights = h0, [], []
        for _ in range(max_len):
            logits, hidden, weights = self.step(hidden, tokens, enc_outputs, valid_lens)
            tokens = logits.argmax(dim=0)
            out_tokens.append(tokens)
            out_weights.append(weights)
        return torch.stack(out_tokens, dim=1), torch.stack(out_weights, dim=1)


@mistakes.keep("weights stacked on the wrong axis",
               "the weights must have shape (batch, max_len, num_steps): one row per output step.")
class _GreedyWeightsTransposed(GreedyDecoder):
    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        tokens, weights = super().greedy(h0, enc_outputs, valid_lens, max_len, bos)
        return tokens, weights.transpose(1, 2)


@mistakes.keep("stopped at <eos>",
               "the loop stopped once every sequence had predicted <eos>, so fewer than max_len steps came "
               "back; run all max_len steps, whatever the tokens.")
class _GreedyStopsAtEos(AttentionDecoder):
    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        tokens = torch.full((h0.shape[0],), bos, dtype=torch.long)
        done = torch.zeros(h0.shape[0], dtype=torch.bool)
        hidden, out_tokens, out_weights = h0, [], []
        for _ in range(max_len):
            logits, hidden, weights = self.step(hidden, tokens, enc_outputs, valid_lens)
            tokens = logits.argmax(dim=-1)
            out_tokens.append(tokens)
            out_weights.append(weights)
            done = done | (tokens == Vocab.eos)
            if bool(done.all()):
                break
        return torch.stack(out_tokens, dim=1), torch.stack(out_weights, dim=1)


@mistakes.keep("stopped when every sequence predicts <eos> at the same step",
               "the loop stopped at a step where every sequence predicted <eos> at once, so fewer than "
               "max_len steps came back; run all max_len steps, whatever the tokens.")
class _GreedyStopsAtCommonEos(AttentionDecoder):
    def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
        tokens = torch.full((h0.shape[0],), bos, dtype=torch.long)
        hidden, out_tokens, out_weights = h0, [], []
        for _ in range(max_len):
            logits, hidden, weights = self.step(hidden, tokens, enc_outputs, valid_lens)
            tokens = logits.argmax(dim=-1)
            out_tokens.append(tokens)
            out_weights.append(weights)
            if bool((tokens == Vocab.eos).all()):
                break
        return torch.stack(out_tokens, dim=1), torch.stack(out_weights, dim=1)


def _greedy_padding_after_eos(feed_padding):
    class PaddedAfterEos(AttentionDecoder):
        def greedy(self, h0, enc_outputs, valid_lens, max_len, bos=1):
            tokens = torch.full((h0.shape[0],), bos, dtype=torch.long)
            done = torch.zeros(h0.shape[0], dtype=torch.bool)
            hidden, out_tokens, out_weights = h0, [], []
            for _ in range(max_len):
                logits, hidden, weights = self.step(hidden, tokens, enc_outputs, valid_lens)
                predicted = logits.argmax(dim=-1)
                recorded = predicted.masked_fill(done, Vocab.pad)
                done = done | (predicted == Vocab.eos)
                tokens = recorded if feed_padding else predicted
                out_tokens.append(recorded)
                out_weights.append(weights)
            return torch.stack(out_tokens, dim=1), torch.stack(out_weights, dim=1)
    return PaddedAfterEos


mistakes.add("padding after <eos>, fed back",
             "after a sequence's <eos> its tokens were replaced by padding, and the padding was fed to the "
             "next steps; the contract keeps the tokens the steps predict after <eos>, and feeds them back.",
             _greedy_padding_after_eos(feed_padding=True))
mistakes.add("padding after <eos>, recorded only",
             "after a sequence's <eos> its recorded tokens were replaced by padding; the contract keeps the "
             "tokens the steps predict after <eos>.",
             _greedy_padding_after_eos(feed_padding=False))


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
        Check("a model that predicts <eos> early in every sequence", _greedy_eos, seed=2,
              hint="in this check every sequence predicts <eos> (index 2) before the last step (in its second "
                   "batch, all at the same step); the contract asks for all max_len steps of every sequence, "
                   "with the tokens and weights the steps produce after <eos>."),
        Check("random sizes and bos (hidden)", _greedy_random, public=False,
              hint="check the loop for any sizes, max_len and bos."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
