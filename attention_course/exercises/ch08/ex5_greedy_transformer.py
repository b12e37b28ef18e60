"""ch08_ex5: Greedy decoding that caches the encoder output.

Complete the class `GreedyTransformer(tf.Transformer)`, a subclass of the chapter's model, by
writing its method `greedy_decode(src, src_lens, max_len)`: `src` `(batch, src_len)` (dtype
`torch.long`), `src_lens` `(batch,)`, `max_len` a Python `int`. Use the inherited methods
`self.encode(src, src_lens)`, which returns the memory `(batch, src_len, d_model)`, and
`self.decode(prefix, memory, src_lens, return_weights=True)`, which returns
`(logits (batch, L, vocab), weights (batch, num_layers, num_heads, L, src_len))` for a decoder
input `prefix` `(batch, L)`; `self.num_layers` and `self.num_heads` give the sizes.

Encode the source **once** (the checks build the model with `max_encodes=1`, which makes a
second call of `encode` raise). Every sequence starts from the prefix `<bos>` (index 1). At step
`i = 0, ..., max_len - 1`, decode the current prefix, take the most likely token of the logits at
its **last** position as token `i`, keep the cross-attention weights of that last position (every
layer and head) as row `i`, and append the token to the prefix. Return `(tokens, weights)`:
`tokens` `(batch, max_len)`, dtype `torch.long`, and `weights` `(batch, num_layers, num_heads,
max_len, src_len)`, dtype `torch.float32`. Once a sequence has produced `<eos>` (index 2; keep
the `<eos>` itself), its later tokens are `0` (`<pad>`) and its later weight rows are zeros; you
may stop early when every sequence has finished.
"""
from __future__ import annotations

import math

import torch

from ... import transformer as tf
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import _kpm, _lens

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


class GreedyTransformer(tf.Transformer):
    """The chapter's Transformer with a greedy decoding loop that encodes once."""

    def greedy_decode(self, src, src_lens, max_len):
        memory = self.encode(src, src_lens)
        batch = src.shape[0]
        prefix = torch.full((batch, 1), 1, dtype=torch.long)          # <bos>
        tokens = torch.zeros(batch, max_len, dtype=torch.long)
        weights = torch.zeros(batch, self.num_layers, self.num_heads, max_len, src.shape[1])
        finished = torch.zeros(batch, dtype=torch.bool)
        for i in range(max_len):
            logits, cross = self.decode(prefix, memory, src_lens, return_weights=True)
            new = logits[:, -1].argmax(dim=-1)
            tokens[:, i] = new.masked_fill(finished, 0)
            weights[:, :, :, i] = cross[:, :, :, -1].masked_fill(finished[:, None, None, None], 0.0)
            finished = finished | (new == 2)
            prefix = torch.cat([prefix, new[:, None]], dim=1)
        return tokens, weights


# Inputs of the public and hidden checks ---------------------------------------------------


def _model_state(g, config, eos_bias):
    template = tf.Transformer(*config).state_dict()
    state = {}
    for name, value in template.items():
        if "norm" in name and name.endswith("weight"):
            state[name] = 1.0 + 0.3 * torch.randn(value.shape, generator=g)
        elif value.dim() == 1:
            state[name] = 0.3 * torch.randn(value.shape, generator=g)
        else:
            state[name] = 1.2 * torch.randn(value.shape, generator=g) / math.sqrt(value.shape[-1])
    state["out.bias"][2] += eos_bias            # make <eos> come up often enough to test what follows it
    return state


def _greedy_call(g, seed, config, batch, src_len, max_len, eos_bias, limit=True):
    src_vocab = config[0]
    src = torch.randint(3, src_vocab, (batch, src_len), generator=g)
    lens = _lens(g, batch, src_len)
    src = src.masked_fill(_kpm(lens, src_len), 0)
    return Call(init_args=config, init_kwargs={"max_encodes": 1} if limit else {}, init_seed=seed,
                state_dict=_model_state(g, config, eos_bias), train=False, method="greedy_decode",
                args=(src, lens, max_len))


def _greedy_main_calls(seed):
    g = gen(seed)
    return [_greedy_call(g, seed, (11, 9, 8, 2, 2, 16), 3, 6, 7, eos_bias=0.0, limit=False)]


def _greedy_encode_once_calls(seed):
    g = gen(seed)
    return [_greedy_call(g, seed, (10, 8, 6, 3, 1, 12), 2, 5, 4, eos_bias=0.0)]


def _greedy_eos_calls(seed):
    g = gen(seed)
    return [_greedy_call(g, seed, (12, 7, 8, 4, 2, 16), 4, 5, 8, eos_bias=1.5, limit=False)]


def _greedy_hidden_calls(seed):
    g = gen(seed)
    heads = randint(g, 1, 3)
    config = (randint(g, 6, 14), randint(g, 5, 10), 2 * heads * randint(g, 1, 2), heads, randint(g, 1, 2),
              randint(g, 6, 16))
    return [_greedy_call(g, seed, config, randint(g, 3, 5), randint(g, 3, 7), randint(g, 6, 9),
                         eos_bias=1.5)]


_GREEDY_HINT = ("tokens (batch, max_len), torch.long, and weights (batch, num_layers, num_heads, max_len, "
                "src_len), float32, are compared: every sequence starts from <bos> (index 1); at step i the "
                "whole prefix is decoded, token i is the argmax of the last position's logits and row i the "
                "cross-attention weights of that last position (every layer and head); the step that emits "
                "<eos> keeps it and its row, the steps after it are 0 and zeros.")


_GREEDY_ONCE_HINT = ("the model is built with max_encodes=1, so a second call of self.encode raises "
                     "RuntimeError; apart from that, this check compares as the others: " + _GREEDY_HINT)


# Kept mistakes, each with its hint --------------------------------------------------------


def _greedy_variant(reencode=False, row="last", pad_after_eos=True, logits_at="last", head_mean=False,
                    eos_step_cleared=False):
    class _Greedy(tf.Transformer):
        def greedy_decode(self, src, src_lens, max_len):
            memory = None if reencode else self.encode(src, src_lens)
            batch = src.shape[0]
            prefix = torch.full((batch, 1), 1, dtype=torch.long)
            tokens = torch.zeros(batch, max_len, dtype=torch.long)
            weights = torch.zeros(batch, self.num_layers, self.num_heads, max_len, src.shape[1])
            finished = torch.zeros(batch, dtype=torch.bool)
            for i in range(max_len):
                mem = self.encode(src, src_lens) if reencode else memory
                logits, cross = self.decode(prefix, mem, src_lens, return_weights=True)
                new = logits[:, -1 if logits_at == "last" else 0].argmax(dim=-1)
                rows = cross[:, :, :, -1 if row == "last" else 0]
                if head_mean:
                    rows = rows.mean(dim=2, keepdim=True).expand_as(rows)
                if eos_step_cleared:        # finished updated before the step is written: <eos> itself cleared
                    finished = finished | (new == 2)
                if pad_after_eos:
                    new_out = new.masked_fill(finished, 0)
                    rows = rows.masked_fill(finished[:, None, None, None], 0.0)
                else:
                    new_out = new
                tokens[:, i] = new_out
                weights[:, :, :, i] = rows
                finished = finished | (new == 2)
                prefix = torch.cat([prefix, new[:, None]], dim=1)
            return tokens, weights
    return _Greedy


mistakes.add("encoder run at every step",
             "the memory does not change while decoding: encode the source once, before the loop, and "
             "reuse it at every step.",
             _greedy_variant(reencode=True))


mistakes.add("<eos> step cleared too",
             "your tokens and weights match a loop that marks a sequence finished before writing the step "
             "that emits <eos>, so that <eos> itself becomes 0 and its weight row zeros; the step that "
             "emits <eos> keeps token 2 and its row, only the steps after it are cleared.",
             _greedy_variant(eos_step_cleared=True))


mistakes.add("weights of the first position",
             "the weights of step i are those of the newest position of the prefix (the last query), "
             "not those of the first one.",
             _greedy_variant(row="first"))


mistakes.add("logits of the first position",
             "the next token is the argmax of the logits at the last position of the prefix.",
             _greedy_variant(logits_at="first"))


mistakes.add("nothing cleared after <eos>",
             "once a sequence has emitted <eos>, its later tokens must be 0 (<pad>) and its later weight "
             "rows zeros.",
             _greedy_variant(pad_after_eos=False))


mistakes.add("heads averaged",
             "return every head's weights separately: (batch, num_layers, num_heads, max_len, src_len).",
             _greedy_variant(head_mean=True))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("final teacher-forced pass",
                   "tokens in the loop, then one decode pass over the output "
"for all weight rows; cumsum for what follows <eos>")
class _GreedyAltFinalPass(tf.Transformer):
    """Tokens first (the loop keeps only tokens), then one teacher-forced pass over the
    generated prefix gives every row of cross-attention weights at once."""

    def greedy_decode(self, src, src_lens, max_len):
        memory = self.encode(src, src_lens)
        seq = torch.ones(src.shape[0], 1, dtype=torch.long)
        for _ in range(max_len):
            logits = self.decode(seq, memory, src_lens)
            seq = torch.cat([seq, logits[:, -1:].argmax(-1)], dim=1)
        _, cross = self.decode(seq[:, :-1], memory, src_lens, return_weights=True)
        out = seq[:, 1:]
        eos_seen = (out == 2).long().cumsum(dim=1)
        after = (eos_seen - (out == 2).long()) > 0          # strictly after the first <eos>
        return out.masked_fill(after, 0), cross.masked_fill(after[:, None, None, :, None], 0.0)


@alternatives.keep("one sequence at a time",
                   "a batch of one per source, stopping at its <eos>")
class _GreedyAltPerSequence(tf.Transformer):
    """One source at a time (batch of one), stopping at its <eos>; results padded into place."""

    def greedy_decode(self, src, src_lens, max_len):
        memory = self.encode(src, src_lens)
        batch, num_keys = src.shape
        tokens = torch.zeros(batch, max_len, dtype=torch.long)
        weights = torch.zeros(batch, self.num_layers, self.num_heads, max_len, num_keys)
        for b in range(batch):
            seq = [1]
            for i in range(max_len):
                logits, cross = self.decode(torch.tensor([seq]), memory[b:b + 1], src_lens[b:b + 1],
                                            return_weights=True)
                token = int(logits[0, -1].argmax())
                tokens[b, i] = token
                weights[b, :, :, i] = cross[0, :, :, -1]
                if token == 2:
                    break
                seq.append(token)
        return tokens, weights


@alternatives.keep("LLMs-from-scratch's generation loop",
                   "generate_text_simple's conventions: idx, "
"softmax then argmax with keepdim, torch.cat; stops when every sequence is done")
class _GreedyAltFromScratch(tf.Transformer):
    """The loop of LLMs-from-scratch's generate_text_simple (idx, idx_next, probas, argmax with
    keepdim, torch.cat), with the memory computed before it and <eos> handled after each step."""

    def greedy_decode(self, src, src_lens, max_len):
        memory = self.encode(src, src_lens)
        idx = torch.full((src.shape[0], 1), 1, dtype=torch.long)       # <bos>
        token_ids, attn_rows = [], []
        stopped = torch.zeros(src.shape[0], 1, dtype=torch.bool)
        for _ in range(max_len):
            with torch.no_grad():
                logits, cross = self.decode(idx, memory, src_lens, return_weights=True)
            logits = logits[:, -1, :]
            probas = torch.softmax(logits, dim=-1)
            idx_next = torch.argmax(probas, dim=-1, keepdim=True)       # (batch, 1)
            token_ids.append(torch.where(stopped, torch.zeros_like(idx_next), idx_next))
            attn_rows.append(torch.where(stopped[:, :, None, None], torch.zeros(()), cross[:, :, :, -1, :]))
            stopped = stopped | (idx_next == 2)
            if stopped.all():
                break
            idx = torch.cat((idx, idx_next), dim=1)
        tokens = torch.zeros(src.shape[0], max_len, dtype=torch.long)
        weights = torch.zeros(src.shape[0], self.num_layers, self.num_heads, max_len, src.shape[1])
        tokens[:, :len(token_ids)] = torch.cat(token_ids, dim=1)
        weights[:, :, :, :len(attn_rows)] = torch.stack(attn_rows, dim=3)
        return tokens, weights


@alternatives.keep("lists and a float mask",
                   "per-step lists stacked at the end, an 'alive' 0/1 factor")
class _GreedyAltLists(tf.Transformer):
    """Python lists of per-step results, stacked at the end; a running 'alive' float mask."""

    def greedy_decode(self, src, src_lens, max_len):
        memory = self.encode(src, src_lens)
        prefix = torch.ones(src.shape[0], 1, dtype=torch.long)
        alive = torch.ones(src.shape[0])
        token_steps, weight_steps = [], []
        for _ in range(max_len):
            logits, cross = self.decode(prefix, memory, src_lens, return_weights=True)
            nxt = torch.argmax(logits[:, -1], dim=-1)
            token_steps.append(nxt * alive.long())
            weight_steps.append(cross[..., -1, :] * alive[:, None, None, None])
            alive = alive * (nxt != 2).float()
            prefix = torch.cat([prefix, nxt.unsqueeze(1)], dim=1)
        return torch.stack(token_steps, dim=1), torch.stack(weight_steps, dim=3)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch08_ex5", title="Greedy decoding that caches the encoder output", name="GreedyTransformer",
    reference=GreedyTransformer, kind="class", points=3,
    checks=[
        Check("3 sources, 7 steps, 2 layers of 2 heads: tokens and cross-attention weights", _greedy_main_calls,
              hint=_GREEDY_HINT),
        Check("the source is encoded once (the model allows one call of encode)", _greedy_encode_once_calls,
              hint=_GREEDY_ONCE_HINT),
        Check("4 sources that emit <eos> early: zeros after it", _greedy_eos_calls, hint=_GREEDY_HINT),
        Check("random sizes, encoded once (hidden)", _greedy_hidden_calls, public=False, hint=_GREEDY_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
