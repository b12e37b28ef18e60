"""Chapter 7: translation tasks the course generates itself, and a GRU encoder-decoder
with (or without) additive attention that learns them on a CPU.

The tasks and their vocabularies
--------------------------------
*Dates written by people* -> *ISO 8601 dates* (:func:`make_dataset`), and the **list task**
(:func:`make_list_example`, :func:`make_list_split`, chapter 7's experiment), with the character
vocabularies :data:`SOURCE_VOCAB`, :data:`TARGET_VOCAB` and :data:`LIST_TARGET_VOCAB`: they live in
:mod:`attention_course.dates` (the conventions that give every source one correct target are
there), and this module re-exports every one of their names.

Models
------
* :class:`Encoder` -- embedding + a one-directional ``nn.GRU``; returns every
  step's state (the *annotations* attention looks at) and the final state of each
  sequence (the state at its last valid character, not at the padding).
* :class:`AttentionDecoder` -- the decoder of Bahdanau et al.: at output step ``i``
  the **query** is the decoder's *previous* hidden state ``s_{i-1}``; additive
  attention over the encoder states gives weights and a context ``c_i``; a
  ``nn.GRUCell`` reads ``[embedding(y_{i-1}); c_i]`` and ``s_{i-1}`` and returns
  ``s_i``; the logits come from ``[s_i; c_i]``.
* :class:`PlainDecoder` -- the same decoder with the attention removed: its context
  is the encoder's final state at every step (the encoder-decoder of Cho et al.,
  2014). It returns ``None`` as weights.
* :class:`Seq2Seq` -- encoder + decoder; ``forward`` uses teacher forcing,
  :meth:`Seq2Seq.greedy` decodes greedily and returns the attention weights.

Training and evaluation: :func:`training_step` (one teacher-forced optimiser step),
:func:`train_model` (seeded, a fixed number of steps, a tqdm progress bar),
:func:`greedy_outputs`, :func:`exact_match`, :func:`list_date_accuracy`,
:func:`translate`, :func:`accuracy_by_length`. The shipped trained weights (made by
``bench/bahdanau.py`` and ``bench/ch07_experiment.py``) load with :func:`load_pretrained`.
"""
from __future__ import annotations

import datetime  # noqa: F401 - used by the tasks, now in dates (tr.datetime as before)
import random  # noqa: F401 - likewise (tr.random as before)
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from tqdm.auto import tqdm

# The tasks and their vocabularies (attention_course.dates), every name re-exported: tr.X as before.
from .dates import (BOS, EOS, FILLER_WORDS, FIRST_DAY, LAST_DAY, LIST_TARGET_VOCAB, MONTHS, PAD,  # noqa: F401
                    SOURCE_VOCAB, TARGET_VOCAB, WEEKDAYS, Vocab, _CONNECTORS, _filler, _FORMATS, _ordinal,
                    _ordinal_word, _RANGES, _random_text, _TEENS, _UNITS, format_date, list_date_accuracy,
                    make_dataset, make_example, make_list_example, make_list_split, random_date, to_iso)
from .functional import masked_softmax

__all__ = ["Vocab", "SOURCE_VOCAB", "TARGET_VOCAB", "LIST_TARGET_VOCAB", "FILLER_WORDS", "format_date",
           "to_iso", "random_date", "make_example", "make_dataset", "make_list_example",
           "make_list_split", "list_date_accuracy", "Batches", "encode_split", "Encoder",
           "AttentionDecoder", "PlainDecoder", "Seq2Seq", "build_model", "training_step", "train_model",
           "greedy_outputs", "exact_match", "translate", "accuracy_by_length", "load_pretrained",
           "PRETRAINED_DIR"]

PRETRAINED_DIR = Path(__file__).resolve().parent / "pretrained"


# ------------------------------------------------------------------ tensors and batches

@dataclass
class Batches:
    """A split as padded index tensors.

    ``src`` ``(n, max_src)`` and ``src_lens`` ``(n,)``; ``tgt_in`` = ``<bos>`` + target and
    ``tgt_out`` = target + ``<eos>``, both ``(n, max_tgt + 1)`` padded with ``<pad>``;
    ``pairs`` keeps the texts.
    """

    src: torch.Tensor
    src_lens: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    pairs: list

    def __len__(self) -> int:
        return self.src.shape[0]

    def batch(self, index: torch.Tensor) -> tuple:
        """The examples at ``index``, trimmed to the longest source and target among them."""
        src_lens = self.src_lens[index]
        tgt = self.tgt_out[index]
        tgt_len = int((tgt != Vocab.pad).sum(dim=1).max())
        return (self.src[index, : int(src_lens.max())], src_lens,
                self.tgt_in[index, :tgt_len], tgt[:, :tgt_len])


def _pad(rows: list) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), Vocab.pad, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def encode_split(pairs: list, src_vocab: Vocab = SOURCE_VOCAB,
                 tgt_vocab: Vocab = TARGET_VOCAB) -> Batches:
    src = [src_vocab.encode(s) for s, _ in pairs]
    tgt_in = [tgt_vocab.encode(t, bos=True) for _, t in pairs]
    tgt_out = [tgt_vocab.encode(t, eos=True) for _, t in pairs]
    return Batches(_pad(src), torch.tensor([len(s) for s in src]), _pad(tgt_in), _pad(tgt_out),
                   list(pairs))


# ------------------------------------------------------------------ the models

class Encoder(nn.Module):
    """Embedding + one-directional GRU over the source characters.

    ``forward(src (batch, T) long, src_lens (batch,))`` returns ``outputs``
    ``(batch, T, num_hiddens)`` -- the state after each character, the annotations
    attention looks at (those past a sequence's length are padding and get masked) --
    and ``final`` ``(batch, num_hiddens)``, each sequence's state after its **last
    valid** character (a GRU keeps running over the padding, so the state at
    position ``T - 1`` would be wrong for the shorter sequences).
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size, padding_idx=Vocab.pad)
        self.rnn = nn.GRU(embed_size, num_hiddens, batch_first=True)

    def forward(self, src: torch.Tensor, src_lens: torch.Tensor) -> tuple:
        outputs, _ = self.rnn(self.embedding(src))
        final = outputs[torch.arange(src.shape[0]), src_lens - 1]
        return outputs, final


class AttentionDecoder(nn.Module):
    """GRU decoder with additive attention (Bahdanau et al., 2014).

    Parameters: ``embedding`` (vocab_size x embed_size), the additive scorer
    ``W_q``, ``W_k`` (num_hiddens -> num_hiddens, no bias) and ``w_v``
    (num_hiddens -> 1, no bias), ``cell = nn.GRUCell(embed_size + num_hiddens,
    num_hiddens)`` and ``out = nn.Linear(2 * num_hiddens, vocab_size)``.

    One step (:meth:`step`) from the previous state ``s_{i-1}`` and the previous
    output token ``y_{i-1}``:

    1. scores ``e_{ij} = w_v^T tanh(W_q s_{i-1} + W_k h_j)`` over the encoder states
       ``h_j``, padding masked, softmax over ``j`` -> weights ``a_{ij}``;
    2. context ``c_i = sum_j a_{ij} h_j``;
    3. ``s_i = GRUCell([embedding(y_{i-1}); c_i], s_{i-1})``;
    4. logits ``= out([s_i; c_i])``.
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)
        self.out = nn.Linear(2 * num_hiddens, vocab_size)

    def attend(self, prev_hidden, enc_outputs, valid_lens, keys=None) -> tuple:
        """Context ``(batch, num_hiddens)`` and weights ``(batch, T)`` for the query ``prev_hidden``."""
        if keys is None:
            keys = self.W_k(enc_outputs)
        features = torch.tanh(keys + self.W_q(prev_hidden).unsqueeze(1))    # (batch, T, h)
        scores = self.w_v(features).squeeze(-1)                             # (batch, T)
        weights = masked_softmax(scores.unsqueeze(1), valid_lens).squeeze(1)
        context = torch.bmm(weights.unsqueeze(1), enc_outputs).squeeze(1)
        return context, weights

    def step(self, prev_hidden, tokens, enc_outputs, valid_lens, keys=None) -> tuple:
        """One output step: returns ``(logits (batch, V), hidden (batch, h), weights (batch, T))``.

        ``prev_hidden`` is ``s_{i-1}`` (for the first step, the initial state),
        ``tokens`` ``(batch,)`` the previous output tokens (``<bos>`` first).
        ``keys`` may pass ``W_k(enc_outputs)`` computed once for all steps.
        """
        context, weights = self.attend(prev_hidden, enc_outputs, valid_lens, keys)
        hidden = self.cell(torch.cat([self.embedding(tokens), context], dim=-1), prev_hidden)
        return self.out(torch.cat([hidden, context], dim=-1)), hidden, weights

    def forward(self, tgt_in, h0, enc_outputs, valid_lens) -> tuple:
        """Teacher forcing: logits ``(batch, L, V)`` and weights ``(batch, L, T)``."""
        keys = self.W_k(enc_outputs)   # the same for every output step: compute it once
        hidden, all_logits, all_weights = h0, [], []
        for i in range(tgt_in.shape[1]):
            logits, hidden, weights = self.step(hidden, tgt_in[:, i], enc_outputs, valid_lens, keys)
            all_logits.append(logits)
            all_weights.append(weights)
        return torch.stack(all_logits, 1), torch.stack(all_weights, 1)


class PlainDecoder(nn.Module):
    """The same GRU decoder without attention: its context is the encoder's final state.

    Parameters ``embedding``, ``cell = nn.GRUCell(embed_size + num_hiddens,
    num_hiddens)`` and ``out = nn.Linear(2 * num_hiddens, vocab_size)``, as in
    :class:`AttentionDecoder`. Every step sees only the fixed-length summary of the
    source (the last valid encoder state), as in Cho et al. (2014). Weights are ``None``.
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.cell = nn.GRUCell(embed_size + num_hiddens, num_hiddens)
        self.out = nn.Linear(2 * num_hiddens, vocab_size)

    def step(self, prev_hidden, tokens, enc_outputs, valid_lens, keys=None) -> tuple:
        context = enc_outputs[torch.arange(enc_outputs.shape[0]), valid_lens - 1]
        hidden = self.cell(torch.cat([self.embedding(tokens), context], dim=-1), prev_hidden)
        return self.out(torch.cat([hidden, context], dim=-1)), hidden, None

    def forward(self, tgt_in, h0, enc_outputs, valid_lens) -> tuple:
        hidden, all_logits = h0, []
        for i in range(tgt_in.shape[1]):
            logits, hidden, _ = self.step(hidden, tgt_in[:, i], enc_outputs, valid_lens)
            all_logits.append(logits)
        return torch.stack(all_logits, 1), None


class Seq2Seq(nn.Module):
    """An encoder and a decoder; the decoder starts from the encoder's final state."""

    def __init__(self, encoder: Encoder, decoder: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def forward(self, src, src_lens, tgt_in) -> tuple:
        """Teacher forcing: the decoder reads the true previous token at every step."""
        enc_outputs, final = self.encoder(src, src_lens)
        return self.decoder(tgt_in, final, enc_outputs, src_lens)

    @torch.no_grad()
    def greedy(self, src, src_lens, max_len: int) -> tuple:
        """Greedy decoding: ``tokens (batch, max_len)`` and weights ``(batch, max_len, T)``
        (``None`` without attention). Each step feeds back the model's own previous
        prediction, the most likely token. All ``max_len`` steps are run; what follows a
        sequence's first ``<eos>`` is to be ignored (:meth:`Vocab.decode` stops there).
        """
        enc_outputs, hidden = self.encoder(src, src_lens)
        # The keys W_k h_j are the same at every step: compute them once (as forward does).
        keys = self.decoder.W_k(enc_outputs) if isinstance(self.decoder, AttentionDecoder) else None
        tokens = torch.full((src.shape[0],), Vocab.bos, dtype=torch.long)
        out_tokens, out_weights = [], []
        for _ in range(max_len):
            logits, hidden, weights = self.decoder.step(hidden, tokens, enc_outputs, src_lens, keys)
            tokens = logits.argmax(dim=-1)
            out_tokens.append(tokens)
            out_weights.append(weights)
        weights = None if out_weights[0] is None else torch.stack(out_weights, 1)
        return torch.stack(out_tokens, 1), weights


def build_model(attention: bool = True, embed_size: int = 32, num_hiddens: int = 64,
                src_vocab: Vocab = SOURCE_VOCAB, tgt_vocab: Vocab = TARGET_VOCAB) -> Seq2Seq:
    """The chapter's model, with :class:`AttentionDecoder` or :class:`PlainDecoder`."""
    decoder_class = AttentionDecoder if attention else PlainDecoder
    model = Seq2Seq(Encoder(len(src_vocab), embed_size, num_hiddens),
                    decoder_class(len(tgt_vocab), embed_size, num_hiddens))
    model.tgt_vocab = tgt_vocab     # what exact_match and translate decode with by default
    return model


# ------------------------------------------------------------------ evaluation

def _max_target_len(data: Batches) -> int:
    return data.tgt_out.shape[1]


def _vocab_of(model, tgt_vocab: Optional[Vocab]) -> Vocab:
    return tgt_vocab if tgt_vocab is not None else getattr(model, "tgt_vocab", TARGET_VOCAB)


@torch.no_grad()
def greedy_outputs(model: Seq2Seq, data: Batches, batch_size: int = 1000,
                   tgt_vocab: Optional[Vocab] = None) -> list:
    """The greedy translation (text) of every source of ``data``, at most as long as its targets.

    ``tgt_vocab`` defaults to the vocabulary the model was built with (:func:`build_model`).
    """
    tgt_vocab = _vocab_of(model, tgt_vocab)
    was_training = model.training
    model.eval()
    outputs = []
    for start in range(0, len(data), batch_size):
        index = torch.arange(start, min(start + batch_size, len(data)))
        src, src_lens, _, _ = data.batch(index)
        tokens, _ = model.greedy(src, src_lens, _max_target_len(data))
        outputs += [tgt_vocab.decode(row) for row in tokens]
    model.train(was_training)
    return outputs


def exact_match(model: Seq2Seq, data: Batches, batch_size: int = 1000,
                tgt_vocab: Optional[Vocab] = None) -> torch.Tensor:
    """Bool ``(n,)``: True where the greedy output equals the target exactly."""
    outputs = greedy_outputs(model, data, batch_size, tgt_vocab)
    return torch.tensor([out == target for out, (_, target) in zip(outputs, data.pairs)])


@torch.no_grad()
def translate(model: Seq2Seq, texts: list, max_len: int = 22, src_vocab: Vocab = SOURCE_VOCAB,
              tgt_vocab: Optional[Vocab] = None) -> list:
    """Greedy translations of ``texts``: a list of ``(output text, weights)``, where
    ``weights`` has shape ``(len(output) + 1, len(text))`` (one row per output
    character and one for ``<eos>``) or is ``None`` without attention. ``tgt_vocab``
    defaults to the vocabulary the model was built with."""
    tgt_vocab = _vocab_of(model, tgt_vocab)
    model.eval()
    data = encode_split([(t, "") for t in texts], src_vocab, tgt_vocab)
    tokens, weights = model.greedy(data.src, data.src_lens, max_len)
    results = []
    for i, text in enumerate(texts):
        output = tgt_vocab.decode(tokens[i])
        rows = min(len(output) + 1, max_len)
        results.append((output, None if weights is None else weights[i, :rows, : len(text)]))
    return results


def accuracy_by_length(correct: torch.Tensor, lengths: torch.Tensor, edges: list) -> tuple:
    """Accuracy in the length bins ``[edges[k], edges[k+1])``: ``(centres, accuracy, counts)``.

    Empty bins get accuracy NaN.
    """
    centres, accuracy, counts = [], [], []
    for low, high in zip(edges[:-1], edges[1:]):
        inside = (lengths >= low) & (lengths < high)
        n = int(inside.sum())
        centres.append((low + high - 1) / 2)
        counts.append(n)
        accuracy.append(float(correct[inside].float().mean()) if n else float("nan"))
    return torch.tensor(centres), torch.tensor(accuracy), torch.tensor(counts)


# ------------------------------------------------------------------ training

def _bucketed_batches(data: Batches, batch_size: int, generator: torch.Generator) -> list:
    """One epoch of batches of similar source length, in random order.

    Attention costs time in proportion to the padded source length, and a decoder
    runs as many steps as the longest target of its batch, so batches of similar
    lengths waste far less work on padding than random ones (here about 2.5 times
    less). A random permutation before the stable sort mixes examples of equal length.
    """
    order = torch.randperm(len(data), generator=generator)
    order = order[torch.sort(data.src_lens[order], stable=True).indices]
    batches = [order[i: i + batch_size] for i in range(0, len(order) - batch_size + 1, batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def train_model(model: Seq2Seq, train: Batches, *, val: Optional[Batches] = None,
                max_steps: Optional[int] = None, max_seconds: Optional[float] = None,
                batch_size: int = 128, lr: float = 5e-3, clip: float = 1.0,
                eval_every: int = 100, target: Optional[float] = None,
                stop_at_target: bool = False, seed: int = 0, progress: str = "bar",
                file=None, evaluate=None) -> list:
    """Train with teacher forcing, Adam and cross-entropy over the non-padding targets.

    The budget is ``max_steps`` optimiser steps. (``max_seconds``, a training-time
    budget, is still accepted, but a result trained for a time depends on the machine
    and on its load: the course trains by steps.) Every ``eval_every`` steps (and at
    the end) the exact-match accuracy on ``val`` is measured. Returns the history, a
    list of dicts ``{"step", "seconds", "loss", "val_acc"}`` (``val_acc`` is None
    without ``val``); ``seconds`` is the training time so far. ``evaluate``, if given,
    is called as ``evaluate(model, step)`` at every evaluation and the dict it returns
    is merged into that entry of the history (other measures than the exact match).

    Batches are drawn from a local generator seeded with ``seed``. ``progress``:
    ``"bar"`` shows a tqdm progress bar (a widget in a notebook, one line in a
    terminal), ``"lines"`` prints one line per evaluation (stable text for a notebook),
    ``"none"`` prints nothing.
    """
    if max_steps is None and max_seconds is None:
        raise ValueError("give a budget: max_steps (or max_seconds)")
    if progress not in ("bar", "lines", "none"):
        raise ValueError(f"progress must be 'bar', 'lines' or 'none', got {progress!r}")
    file = file or sys.stdout
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history, step, seconds, running, seen = [], 0, 0.0, 0.0, 0
    batches, cursor = [], 0
    bar = tqdm(total=max_steps, unit="step", file=file, disable=progress != "bar",
               desc="training", leave=True)

    def report() -> None:
        val_acc = float(exact_match(model, val).float().mean()) if val is not None else None
        model.train()
        loss = running / max(seen, 1)
        history.append({"step": step, "seconds": seconds, "loss": loss, "val_acc": val_acc})
        if evaluate is not None:
            history[-1].update(evaluate(model, step))
            model.train()
        acc = "" if val_acc is None else f"  val exact match {100 * val_acc:5.1f}%"
        if progress == "lines":
            budget = f"step {step:>5d}/{max_steps}" if max_steps is not None else f"step {step:>5d}"
            print(f"{budget}  loss {loss:.4f}{acc}", file=file, flush=True)
        elif progress == "bar":
            bar.set_postfix_str(f"loss {loss:.4f}{acc}")

    model.train()
    while True:
        if (max_steps is not None and step >= max_steps) or \
                (max_seconds is not None and seconds >= max_seconds):
            break
        start = time.perf_counter()
        if cursor == len(batches):
            batches, cursor = _bucketed_batches(train, batch_size, generator), 0
        index = batches[cursor]
        cursor += 1
        loss = training_step(model, optimizer, *train.batch(index), clip=clip)
        step += 1
        seconds += time.perf_counter() - start
        running += loss
        seen += 1
        bar.update(1)
        if step % eval_every == 0:
            report()
            running, seen = 0.0, 0
            if stop_at_target and target is not None and history[-1]["val_acc"] is not None \
                    and history[-1]["val_acc"] >= target:
                break
    if not history or history[-1]["step"] != step:
        report()
    bar.close()
    return history


def training_step(model: Seq2Seq, optimizer, src, src_lens, tgt_in, tgt_out, clip: float = 1.0) -> float:
    """One optimiser step of teacher forcing on one batch; returns the batch's loss.

    The decoder reads the true previous tokens ``tgt_in`` and predicts ``tgt_out``;
    the loss is the cross-entropy averaged over the target positions that are not
    padding. Gradients are clipped to norm ``clip`` (recurrent networks occasionally
    produce very large ones).
    """
    logits, _ = model(src, src_lens, tgt_in)                     # (batch, L, vocab_size)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1),
                           ignore_index=Vocab.pad)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss.item()


# ------------------------------------------------------------------ shipped weights

def load_pretrained(attention: bool = True, task: str = "dates") -> Seq2Seq:
    """A trained model shipped with the course, in eval mode.

    ``task="dates"`` (the default): two models trained on :func:`make_dataset`'s single
    dates and date ranges (target vocabulary :data:`TARGET_VOCAB`), used by chapter 8.
    The shipped files were made by an earlier version of ``bench/bahdanau.py`` with a
    60-second training budget per model (``pretrained/ch07_measured.txt``,
    ``ch07_curves.csv``); ``bench/bahdanau.py --save`` now replaces them with models
    trained for a fixed number of steps. ``task="lists"``: the first seed's models of
    ``bench/ch07_experiment.py``, trained on the list task of
    :func:`make_list_example` (target vocabulary :data:`LIST_TARGET_VOCAB`), which
    chapter 7 draws its alignments from.
    """
    files = {"dates": "ch07_{}.pt", "lists": "ch07_lists_{}.pt"}
    if task not in files:
        raise ValueError(f"task must be one of {sorted(files)}, got {task!r}")
    name = files[task].format("attention" if attention else "baseline")
    state = torch.load(PRETRAINED_DIR / name, weights_only=True)
    config = dict(state.pop("_config"))
    config.pop("task", None)
    vocab = LIST_TARGET_VOCAB if task == "lists" else TARGET_VOCAB
    model = build_model(attention=attention, tgt_vocab=vocab, **{k: int(v) for k, v in config.items()})
    model.load_state_dict({k: v.float() for k, v in state.items()})
    return model.eval()
