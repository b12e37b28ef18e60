"""ch08_ex1: The decoder's mask for left-padded targets.

Batched generation often pads on the **left**, so that every sequence of a batch ends at the
last position. Write `left_padded_self_mask(tgt_lens, num_tokens)` for such a batch of target
sequences: sequence `b` is `num_tokens - tgt_lens[b]` padding positions followed by its
`tgt_lens[b]` real tokens. `tgt_lens` is an integer tensor of shape `(batch,)` and `num_tokens`
a Python `int`, the padded length. Return a `torch.bool` tensor of shape
`(batch, num_tokens, num_tokens)` whose entry `[b, i, j]` is `True` when query `i` of sequence
`b` must not attend to key `j`: when key `j` is in the future of query `i` (`j > i`) or when
position `j` of sequence `b` is padding. A length of 0 is allowed (the whole sequence is
padding). Raise `ValueError` naming `tgt_lens` and giving its shape when `tgt_lens` is not 1-D
(a 0-d tensor and a `(batch, 1)` column are not 1-D either), and naming `tgt_lens` and giving the
value of `num_tokens` when a length lies outside `[0, num_tokens]` (a negative length included).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import transformer as tf
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, shape_of
from ._common import _public_or_drawn

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_tgt_lens(tgt_lens, num_tokens):
    if not isinstance(tgt_lens, torch.Tensor) or tgt_lens.dim() != 1:
        raise ValueError(f"tgt_lens must be a 1-D tensor of lengths (batch,), got tgt_lens of shape "
                         f"{shape_of(tgt_lens)}")
    if tgt_lens.numel() and (int(tgt_lens.min()) < 0 or int(tgt_lens.max()) > num_tokens):
        raise ValueError(f"tgt_lens must lie between 0 and num_tokens={num_tokens}, got {tgt_lens.tolist()}")


def left_padded_self_mask(tgt_lens, num_tokens):
    """Bool (batch, num_tokens, num_tokens): True where query i must not see key j."""
    _validate_tgt_lens(tgt_lens, num_tokens)
    pos = torch.arange(num_tokens)
    future = pos[None, :] > pos[:, None]                       # (num_tokens, num_tokens)
    first_real = num_tokens - tgt_lens                          # (batch,): where the real tokens start
    padding = pos[None, :] < first_real[:, None]                # (batch, num_tokens): padded keys
    return future[None] | padding[:, None, :]


# Inputs of the public and hidden checks ---------------------------------------------------


def _shuffled(g, lens):
    """The lengths ``lens`` in an order drawn from ``g``, as a tensor."""
    lens = torch.tensor(lens)
    return lens[torch.randperm(len(lens), generator=g)]


def _mask_main_calls(seed):
    """Three targets: a full one, a padded one and one of a single token (5, 3 and 1 of 5 tokens at the
    public seed; 4 to 9 tokens, in any order, at any other)."""
    def draw(g):
        n = randint(g, 4, 9)
        return [Call(args=(_shuffled(g, [n, randint(g, 2, n - 1), 1]), n))]
    return _public_or_drawn(seed, lambda: [Call(args=(torch.tensor([5, 3, 1]), 5))], draw)


def _mask_unpadded_calls(seed):
    """Unpadded targets (every length num_tokens: the plain causal mask), then one of a single token."""
    def draw(g):
        n = randint(g, 2, 9)
        return [Call(args=(torch.full((randint(g, 1, 4),), n), n)),
                Call(args=(torch.ones(randint(g, 1, 3), dtype=torch.long), 1))]
    return _public_or_drawn(seed, lambda: [Call(args=(torch.tensor([4, 4]), 4)), Call(args=(torch.tensor([1]), 1))],
                            draw)


def _mask_empty_calls(seed):
    """A target of length 0 (all padding) beside a full one and a padded one (lengths 0, 3 and 1 of
    3 tokens at the public seed; 2 to 7 tokens, in any order, at any other)."""
    def draw(g):
        n = randint(g, 2, 7)
        return [Call(args=(_shuffled(g, [0, n, randint(g, 1, n - 1)]), n))]
    return _public_or_drawn(seed, lambda: [Call(args=(torch.tensor([0, 3, 1]), 3))], draw)


def _mask_bad_public():
    # Not 1-D: a row (1, 2), a column (2, 1) and a 0-d tensor; out of range: above num_tokens, negative.
    return [Call(args=(torch.tensor([[3, 2]]), 3)), Call(args=(torch.tensor([[2], [3]]), 3)),
            Call(args=(torch.tensor(3), 3)), Call(args=(torch.tensor([2, 5]), 4)),
            Call(args=(torch.tensor([2, -1]), 4))]


def _mask_bad_calls(seed):
    """A row (1, k), a column (k, 1), a 0-d tensor; a length above num_tokens, a negative one."""
    def draw(g):
        n, m = randint(g, 2, 8), randint(g, 2, 8)

        def lens(*shape):
            return torch.randint(0, n + 1, shape, generator=g)
        return [Call(args=(lens(1, randint(g, 2, 4)), n)), Call(args=(lens(randint(g, 2, 4), 1), n)),
                Call(args=(lens(), n)), Call(args=(_shuffled(g, [randint(g, 0, m), m + randint(g, 1, 3)]), m)),
                Call(args=(_shuffled(g, [randint(g, 0, m), -randint(g, 1, 3)]), m))]
    return _public_or_drawn(seed, _mask_bad_public, draw)


def _mask_hidden_calls(seed):
    g = gen(seed)
    calls = []
    for k in range(3):
        n = randint(g, 2, 9)
        lens = torch.randint(0, n + 1, (randint(g, 2, 5),), generator=g)
        lens[0] = n                      # a full sequence: right and left padding agree on it
        if k == 0:
            lens[-1] = 0                 # an all-padding sequence
        elif k == 1:
            lens[-1] = randint(g, 1, n - 1)   # a padded one, whatever the draw
        calls.append(Call(args=(lens, n)))
    return calls


def _mask_hidden_bad_calls(seed):
    g = gen(seed)
    n = randint(g, 2, 8)
    return [Call(args=(torch.tensor([n, n + randint(g, 1, 3)]), n)),
            Call(args=(torch.tensor([-randint(g, 1, 3), n]), n)),
            Call(args=(torch.full((randint(g, 2, 4), 1), n), n))]


def _mask_mention(call):
    lens = call.args[0]
    if lens.dim() == 0:
        return ["tgt_lens"]     # a 0-d shape prints as nothing in some forms ("x".join): the name suffices
    if lens.dim() != 1:
        return ["tgt_lens", tuple(lens.shape)]
    return ["tgt_lens", str(call.args[1])]


_MASK_HINT = ("entry [b, i, j] is True when key j lies in the future of query i (j > i) or when position j "
              "of sequence b is padding; with left padding the padding is the first num_tokens - "
              "tgt_lens[b] positions of the sequence, and whether a key is padding depends on the key "
              "index j only. A length of 0 is allowed (the block of that sequence is True everywhere).")


_MASK_EMPTY_HINT = ("this call has a sequence of length 0 (all padding) beside a full sequence and a padded one: "
                    "a length of 0 is allowed, the call returns a mask, and the block of the all-padding "
                    "sequence is True everywhere (all its keys are padding); the other two blocks follow the "
                    "same rule as in the checks above.")


_MASK_ERROR_HINT = ("these calls pass a tgt_lens that is not 1-D (a row, a (batch, 1) column, a 0-d tensor) "
                    "or that holds a length outside [0, num_tokens] (above it, or negative); each must raise "
                    "ValueError, its message naming tgt_lens and giving its shape (not 1-D) or the value of "
                    "num_tokens (out of range).")


# Kept mistakes, each with its hint --------------------------------------------------------


def _mask_checked(body):
    def impl(tgt_lens, num_tokens):
        _validate_tgt_lens(tgt_lens, num_tokens)
        pos = torch.arange(num_tokens)
        return body(pos, tgt_lens, num_tokens)
    return impl


def _causal(pos):
    return pos[None, :] > pos[:, None]


mistakes.add("causal mask only",
             "your mask is the causal mask alone, the shortcut that works for right padding only: with "
             "left padding the padded keys come before the real queries (j < num_tokens - tgt_lens[b] "
             "<= i), where the causal mask does not hide them, so the padding must be hidden as well.",
             _mask_checked(lambda pos, lens, n: _causal(pos)[None].expand(len(lens), -1, -1)))


mistakes.add("padding on the right",
             "your mask hides the last num_tokens - tgt_lens[b] keys, as for right padding; these "
             "targets are padded on the left: the padding is the first num_tokens - tgt_lens[b] "
             "positions, and the real tokens end at the last position.",
             _mask_checked(lambda pos, lens, n: _causal(pos)[None] | (pos[None, :] >= lens[:, None])[:, None, :]))


mistakes.add("tgt_lens taken as the number of padded positions",
             "your mask hides the first tgt_lens[b] keys; tgt_lens[b] counts the real tokens, so the "
             "padding is the first num_tokens - tgt_lens[b] positions.",
             _mask_checked(lambda pos, lens, n: _causal(pos)[None] | (pos[None, :] < lens[:, None])[:, None, :]))


mistakes.add("first real token hidden",
             "your mask also hides key num_tokens - tgt_lens[b], the first real token of sequence b "
             "(an off-by-one at the boundary): only the keys before it are padding.",
             _mask_checked(lambda pos, lens, n: _causal(pos)[None]
                           | (pos[None, :] <= (n - lens)[:, None])[:, None, :]))


mistakes.add("padding hidden on the queries",
             "your mask hides the whole rows of the padded queries but lets the real queries read the "
             "padded keys; the padding belongs on the keys (the last axis): the columns of the padded "
             "positions are hidden for every query.",
             _mask_checked(lambda pos, lens, n: _causal(pos)[None]
                           | (pos[None, :] < (n - lens)[:, None])[:, :, None]))


mistakes.add("True where visible",
             "True marks the pairs a query must NOT attend to; your mask is the opposite.",
             _mask_checked(lambda pos, lens, n: ~(_causal(pos)[None]
                                                  | (pos[None, :] < (n - lens)[:, None])[:, None, :])))


mistakes.add("diagonal hidden",
             "a token may attend to itself: hide only the keys strictly after the query (j > i).",
             _mask_checked(lambda pos, lens, n: (pos[None, :] >= pos[:, None])[None]
                           | (pos[None, :] < (n - lens)[:, None])[:, None, :]))


@mistakes.keep("length 0 rejected",
               "your answer raises an error for a length of 0, which the contract allows: a sequence of "
               "length 0 is all padding, and its block of the mask is True everywhere.")
def _mask_rejects_empty(tgt_lens, num_tokens):
    _validate_tgt_lens(tgt_lens, num_tokens)
    if bool((tgt_lens == 0).any()):
        raise ValueError(f"tgt_lens must be positive, got {tgt_lens.tolist()}")
    return left_padded_self_mask(tgt_lens, num_tokens)


@mistakes.keep("no validation of tgt_lens",
               "a tgt_lens that is not 1-D, or a length outside [0, num_tokens], must raise ValueError "
               "naming tgt_lens, not produce a mask or fail with an unrelated error.")
def _mask_unvalidated(tgt_lens, num_tokens):
    pos = torch.arange(num_tokens)
    return _causal(pos)[None] | (pos[None, :] < (num_tokens - tgt_lens)[:, None])[:, None, :]


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("python loops",
                   "three nested loops over sequences, queries and keys; shapes as lists")
def _mask_alt_loops(tgt_lens, num_tokens):
    if not isinstance(tgt_lens, torch.Tensor) or tgt_lens.dim() != 1:
        raise ValueError(f"tgt_lens should be one length per sequence; tgt_lens has shape {list(tgt_lens.shape)}")
    lengths = [int(n) for n in tgt_lens]
    if any(n < 0 or n > num_tokens for n in lengths):
        raise ValueError(f"every entry of tgt_lens must be in [0, num_tokens] with num_tokens={num_tokens}")
    out = torch.zeros(len(lengths), num_tokens, num_tokens, dtype=torch.bool)
    for b, n in enumerate(lengths):
        start = num_tokens - n
        for i in range(num_tokens):
            for j in range(num_tokens):
                out[b, i, j] = j > i or j < start
    return out


@alternatives.keep("the package's right-padding mask, flipped",
                   "tf.padding_mask reversed along the positions gives the left padding; tf.causal_mask "
                   "for the future")
def _mask_alt_flipped(tgt_lens, num_tokens):
    # Right padding hides the last num_tokens - len positions; reversing the positions puts that
    # padding first, where a left-padded sequence has it.
    if tgt_lens.dim() != 1:
        raise ValueError(f"tgt_lens: expected (batch,), got {torch.Size(tgt_lens.shape)}")
    if bool((tgt_lens < 0).any()) or bool((tgt_lens > num_tokens).any()):
        raise ValueError(f"tgt_lens {tgt_lens.tolist()} out of range for num_tokens={num_tokens}")
    left_padding = tf.padding_mask(tgt_lens, num_tokens).flip(-1)          # (batch, num_tokens)
    return tf.causal_mask(num_tokens)[None] | left_padding[:, None, :]


@alternatives.keep("Annotated Transformer's style on padded tokens",
                   "builds the left-padded token rows with F.pad, then (tgt != pad) & subsequent_mask, "
                   "inverted at the end")
def _mask_alt_tokens(tgt_lens, num_tokens):
    # The Annotated Transformer's convention: True = may attend, (tgt != pad) & subsequent_mask.
    # Here the token rows are made up (1 = a real token, 0 = <pad>), left-padded with F.pad.
    if tgt_lens.ndim != 1:
        raise ValueError("tgt_lens: expected a 1-D tensor, got one of shape " + str(list(tgt_lens.size())))
    if tgt_lens.numel() > 0 and (tgt_lens.max().item() > num_tokens or tgt_lens.min().item() < 0):
        raise ValueError("tgt_lens has a length outside [0, %d] (num_tokens = %d)" % (num_tokens, num_tokens))
    pad = 0
    tgt = torch.stack([F.pad(torch.ones(int(n), dtype=torch.long), (num_tokens - int(n), 0), value=pad)
                       for n in tgt_lens]) if len(tgt_lens) else torch.zeros(0, num_tokens, dtype=torch.long)
    subsequent_mask = torch.triu(torch.ones(1, num_tokens, num_tokens), diagonal=1).type(torch.uint8) == 0
    tgt_mask = (tgt != pad).unsqueeze(-2) & subsequent_mask
    return tgt_mask == 0


@alternatives.keep("float tril and einsum",
                   "0/1 lower triangle times 0/1 real keys, hidden where 0")
def _mask_alt_float_tril(tgt_lens, num_tokens):
    # Visible = lower triangle times a 0/1 row of real keys; hidden = where that product is 0.
    if len(tgt_lens.shape) != 1:
        raise ValueError("tgt_lens must be 1-D, got shape %s" % "x".join(map(str, tgt_lens.shape)))
    if tgt_lens.numel() and not (0 <= tgt_lens.min().item() and tgt_lens.max().item() <= num_tokens):
        raise ValueError(f"a length in tgt_lens exceeds num_tokens={num_tokens} or is negative")
    lower = torch.tril(torch.ones(num_tokens, num_tokens))
    from_the_end = torch.arange(num_tokens - 1, -1, -1).float()          # num_tokens - 1 - j
    real_keys = (from_the_end[None, :] < tgt_lens.float()[:, None]).float()
    return torch.einsum("ij,bj->bij", lower, real_keys) == 0


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch08_ex1", title="The decoder's mask for left-padded targets", name="left_padded_self_mask",
    reference=left_padded_self_mask, points=2,
    checks=[
        Check("3 targets of lengths 5, 3 and 1, left-padded to 5 tokens", _mask_main_calls, hint=_MASK_HINT),
        Check("unpadded targets (the plain causal mask) and a single token", _mask_unpadded_calls,
              hint=_MASK_HINT),
        Check("an all-padding target (length 0) beside targets of lengths 3 and 1", _mask_empty_calls,
              hint=_MASK_EMPTY_HINT),
        Check("tgt_lens not 1-D (a row, a column, 0-d) or out of range (too large, negative) raises ValueError "
              "naming it", _mask_bad_calls,
              must_mention=_mask_mention, hint=_MASK_ERROR_HINT, weight=0.5),
        Check("random batches and lengths, one of them 0 (hidden)", _mask_hidden_calls, public=False,
              hint=_MASK_HINT),
        Check("a length above num_tokens, a negative length, a (batch, 1) column (hidden)",
              _mask_hidden_bad_calls, public=False,
              must_mention=_mask_mention, hint=_MASK_ERROR_HINT, weight=0.25),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
