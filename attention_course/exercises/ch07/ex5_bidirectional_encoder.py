"""ch07_ex5: A bidirectional encoder for a padded batch.

{footcite:t}`bahdanau2014` used a bidirectional encoder. Write a class
`BidirectionalEncoder(nn.Module)` with constructor
`BidirectionalEncoder(vocab_size, embed_size, num_hiddens)` that creates exactly these
parameters: `embedding = nn.Embedding(vocab_size, embed_size)` (a `padding_idx` is up to you)
and `rnn = nn.GRU(embed_size, num_hiddens, batch_first=True, bidirectional=True)`.

`forward(src, src_lens)` takes a padded batch of token indices `src` `(batch, num_steps)`
(dtype `torch.long`) and the valid lengths `src_lens` `(batch,)`, and returns `outputs` of shape
`(batch, num_steps, 2 * num_hiddens)`, float32:

- at a valid position `j < src_lens[b]`: the forward direction's state after reading
  `src[b, 0], ..., src[b, j]`, followed by the backward direction's state after reading
  `src[b, src_lens[b] - 1]` down to `src[b, j]`; neither direction ever reads the padding;
- at every padding position: zeros.

Raise `ValueError` naming `src_lens` when a length is below 1 or above `num_steps`.
"""
from __future__ import annotations

from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import _steps_mask

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _check_src_lens(src, src_lens):
    num_steps = src.shape[1]
    if src_lens.numel() and (int(src_lens.min()) < 1 or int(src_lens.max()) > num_steps):
        raise ValueError(f"src_lens must lie between 1 and num_steps={num_steps}, got src_lens={src_lens.tolist()}")


class BidirectionalEncoder(nn.Module):
    """Embedding + bidirectional GRU over a padded batch; each direction sees only the
    sequence's own characters, and the padding positions are zeros."""

    def __init__(self, vocab_size, embed_size, num_hiddens):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings=vocab_size, embedding_dim=embed_size)
        self.rnn = nn.GRU(embed_size, num_hiddens, batch_first=True, bidirectional=True)

    def forward(self, src, src_lens):
        _check_src_lens(src, src_lens)
        packed = pack_padded_sequence(self.embedding(src), src_lens.cpu(), batch_first=True,
                                      enforce_sorted=False)
        outputs, _ = self.rnn(packed)
        return pad_packed_sequence(outputs, batch_first=True, total_length=src.shape[1])[0]


# Inputs of the public and hidden checks ---------------------------------------------------


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
    g = gen(seed)
    return [_bi_call(g, 9, 3, 4, [5, 2, 4], 5)]


def _bi_no_padding(seed):
    g = gen(seed)
    return [_bi_call(g, 7, 2, 3, [4, 4], 4), _bi_call(g, 7, 2, 3, [1], 1)]


def _bi_all_short(seed):
    g = gen(seed)
    return [_bi_call(g, 8, 3, 2, [2, 3], 5)]


def _bi_bad(seed):
    g = gen(seed)
    call = _bi_call(g, 6, 2, 3, [3, 2], 3)
    src = call.args[0]
    return [Call(init_args=call.init_args, init_seed=0, state_dict=call.state_dict, args=(src, torch.tensor([0, 3]))),
            Call(init_args=call.init_args, init_seed=0, state_dict=call.state_dict, args=(src, torch.tensor([3, 4])))]


def _bi_random(seed):
    g = gen(seed)
    batch, num_steps = randint(g, 2, 6), randint(g, 2, 9)
    lens = torch.randint(1, num_steps + 1, (batch,), generator=g).tolist()
    lens[0], lens[-1] = num_steps, 1
    vocab, embed, hidden = randint(g, 4, 12), randint(g, 2, 5), randint(g, 2, 6)
    shorter = torch.randint(1, num_steps, (2,), generator=g).tolist()     # both below num_steps
    return [_bi_call(g, vocab, embed, hidden, lens, num_steps),
            _bi_call(g, vocab, embed, hidden, shorter, num_steps)]


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("backward direction reads the padding",
               "at the valid positions of the shorter sequences the backward half is wrong: a GRU run over "
               "the padded batch starts its backward pass on the padding. Each sequence's backward pass "
               "must start at its own last character.")
class _BiPaddingRead(BidirectionalEncoder):
    """The padded batch straight into the GRU: the backward direction starts on the padding."""

    def forward(self, src, src_lens):
        _check_src_lens(src, src_lens)
        outputs, _ = self.rnn(self.embedding(src))
        return outputs * _steps_mask(src_lens, src.shape[1]).unsqueeze(-1)


@mistakes.keep("padding positions not zero",
               "the valid positions are right, but the padding positions must hold zeros.")
class _BiPaddingKept(BidirectionalEncoder):
    """Right at the valid positions, but the padding positions keep what a pass over the
    padded batch left there."""

    def forward(self, src, src_lens):
        right = super().forward(src, src_lens)
        raw, _ = self.rnn(self.embedding(src))
        return torch.where(_steps_mask(src_lens, src.shape[1]).unsqueeze(-1), right, raw)


@mistakes.keep("output cut to the longest sequence",
               "the output has as many positions as the longest sequence, not num_steps (src.shape[1]): "
               "when every sequence is shorter than the batch, keep the full width (pad_packed_sequence "
               "has an argument for it).")
class _BiNoTotalLength(BidirectionalEncoder):
    def forward(self, src, src_lens):
        _check_src_lens(src, src_lens)
        packed = pack_padded_sequence(self.embedding(src), src_lens.cpu(), batch_first=True,
                                      enforce_sorted=False)
        return pad_packed_sequence(self.rnn(packed)[0], batch_first=True)[0]


@mistakes.keep("directions swapped",
               "the two halves are in the wrong order: the forward states come first, then the backward "
               "states.")
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


@mistakes.keep("backward outputs not reversed back",
               "the backward half is in reversed order: after running it on the reversed sequence, put "
               "its outputs back in the order of the source.")
class _BiNotReversedBack(BidirectionalEncoder):
    """Reverses each sequence for the backward direction but forgets to reverse its outputs back."""

    def forward(self, src, src_lens):
        _check_src_lens(src, src_lens)
        x = self.embedding(src)
        forward_out, _ = _one_direction(self.rnn, "")(x)
        backward_out, _ = _one_direction(self.rnn, "_reverse")(_reverse_valid(x, src_lens))
        mask = _steps_mask(src_lens, src.shape[1]).unsqueeze(-1)
        return torch.cat([forward_out, backward_out], dim=-1) * mask


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("one sequence at a time",
                   "each sequence cut to its length and run alone, zeros "
"elsewhere; padding_idx set; parameters created in another order")
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


@alternatives.keep("reversal by index",
                   "two one-directional passes sharing the parameters, the backward "
"one on the sequences reversed within their lengths")
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


@alternatives.keep("GRU by hand",
                   "the GRU equations per time step, torch.where keeps a state over the "
    "padding")
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


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch07_ex5", title="A bidirectional encoder for a padded batch", name="BidirectionalEncoder",
    reference=BidirectionalEncoder, kind="class", points=2,
    checks=[
        Check("3 sequences of lengths 5, 2 and 4 padded to 5 steps", _bi_padded, seed=0,
              hint="this check has padding: compare, at each valid position, the forward half and the "
                   "backward half separately, and the padding positions."),
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
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
