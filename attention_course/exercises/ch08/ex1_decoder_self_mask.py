"""ch08_ex1: The decoder's combined padding and causal mask.

Write `decoder_self_mask(tgt_lens, num_tokens)` for a batch of right-padded target sequences.
`tgt_lens` is an integer tensor of shape `(batch,)`, the valid length of each sequence, and
`num_tokens` a Python `int`, the padded length. Return a `torch.bool` tensor of shape
`(batch, num_tokens, num_tokens)` whose entry `[b, i, j]` is `True` when query `i` of sequence
`b` must not attend to key `j`: when `j > i` (the future) or `j >= tgt_lens[b]` (padding). A
length of 0 is allowed (every key hidden). Raise `ValueError` naming `tgt_lens` and giving its
shape when `tgt_lens` is not 1-D (a 0-d tensor and a `(batch, 1)` column are not 1-D either), and
naming `tgt_lens` and giving the value of `num_tokens` when a length lies outside
`[0, num_tokens]` (a negative length included).
"""
from __future__ import annotations

import torch

from ...functional import valid_mask
from ...registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, shape_of

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_tgt_lens(tgt_lens, num_tokens):
    if not isinstance(tgt_lens, torch.Tensor) or tgt_lens.dim() != 1:
        raise ValueError(f"tgt_lens must be a 1-D tensor of lengths (batch,), got tgt_lens of shape "
                         f"{shape_of(tgt_lens)}")
    if tgt_lens.numel() and (int(tgt_lens.min()) < 0 or int(tgt_lens.max()) > num_tokens):
        raise ValueError(f"tgt_lens must lie between 0 and num_tokens={num_tokens}, got {tgt_lens.tolist()}")


def decoder_self_mask(tgt_lens, num_tokens):
    """Bool (batch, num_tokens, num_tokens): True where query i must not see key j."""
    _validate_tgt_lens(tgt_lens, num_tokens)
    pos = torch.arange(num_tokens)
    future = pos[None, :] > pos[:, None]                       # (num_tokens, num_tokens)
    padding = pos[None, :] >= tgt_lens[:, None]                 # (batch, num_tokens): padded keys
    return future[None] | padding[:, None, :]


# Inputs of the public and hidden checks ---------------------------------------------------


def _mask_main_calls(seed):
    return [Call(args=(torch.tensor([5, 3, 1]), 5))]


def _mask_edge_calls(seed):
    return [Call(args=(torch.tensor([4, 4]), 4)), Call(args=(torch.tensor([0, 2]), 3)),
            Call(args=(torch.tensor([1]), 1))]


def _mask_bad_calls(seed):
    # Not 1-D: a row (1, 2), a column (2, 1) and a 0-d tensor; out of range: above num_tokens, negative.
    return [Call(args=(torch.tensor([[3, 2]]), 3)), Call(args=(torch.tensor([[2], [3]]), 3)),
            Call(args=(torch.tensor(3), 3)), Call(args=(torch.tensor([2, 5]), 4)),
            Call(args=(torch.tensor([2, -1]), 4))]


def _mask_hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(3):
        n = randint(g, 2, 9)
        calls.append(Call(args=(torch.randint(0, n + 1, (randint(g, 1, 5),), generator=g), n)))
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


_MASK_HINT = ("entry [b, i, j] is True when key j lies in the future of query i (j > i) or in the padding "
              "of sequence b (j >= tgt_lens[b]); the padding condition depends on the key index only.")


_MASK_ERROR_HINT = ("these calls pass a tgt_lens that is not 1-D (a row, a (batch, 1) column, a 0-d tensor) "
                    "or that holds a length outside [0, num_tokens] (above it, or negative); each must raise "
                    "ValueError, its message naming tgt_lens and giving its shape (not 1-D) or the value of "
                    "num_tokens (out of range).")


# Kept mistakes, each with its hint --------------------------------------------------------


def _mask_checked(body):
    def impl(tgt_lens, num_tokens):
        _validate_tgt_lens(tgt_lens, num_tokens)
        pos = torch.arange(num_tokens)
        return body(pos, tgt_lens)
    return impl


mistakes.add("causal mask only",
             "your mask hides the future but not the padding: key j must also be hidden when "
             "j >= tgt_lens[b].",
             _mask_checked(lambda pos, lens: (pos[None, :] > pos[:, None])[None].expand(len(lens), -1, -1)))


mistakes.add("padding mask only",
             "your mask hides the padding but not the future: query i must not see the keys j > i.",
             _mask_checked(lambda pos, lens: (pos[None, :] >= lens[:, None])[:, None, :]
                           .expand(-1, len(pos), -1)))


mistakes.add("padding hidden on the queries",
             "your mask hides the whole rows of the padded queries; the padding mask belongs on the "
             "keys (the last axis): a padded query still sees the real keys up to its own position, "
             "and only the columns of the padded keys are hidden.",
             _mask_checked(lambda pos, lens: (pos[None, :] > pos[:, None])[None]
                           | (pos[None, :] >= lens[:, None])[:, :, None]))


mistakes.add("True where visible",
             "True marks the pairs a query must NOT attend to; your mask is the opposite.",
             _mask_checked(lambda pos, lens: ~((pos[None, :] > pos[:, None])[None]
                                               | (pos[None, :] >= lens[:, None])[:, None, :])))


mistakes.add("diagonal hidden",
             "a token may attend to itself: hide only the keys strictly after the query (j > i).",
             _mask_checked(lambda pos, lens: (pos[None, :] >= pos[:, None])[None]
                           | (pos[None, :] >= lens[:, None])[:, None, :]))


@mistakes.keep("no validation of tgt_lens",
               "a tgt_lens that is not 1-D, or a length outside [0, num_tokens], must raise ValueError "
               "naming tgt_lens, not produce a mask or fail with an unrelated error.")
def _mask_unvalidated(tgt_lens, num_tokens):
    pos = torch.arange(num_tokens)
    return (pos[None, :] > pos[:, None])[None] | (pos[None, :] >= tgt_lens[:, None])[:, None, :]


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
        for i in range(num_tokens):
            for j in range(num_tokens):
                out[b, i, j] = j > i or j >= n
    return out


@alternatives.keep("functional.valid_mask",
                   "the course's valid_mask for the padding, triu for the future")
def _mask_alt_valid_mask(tgt_lens, num_tokens):
    # The course's functional.valid_mask (True = may attend) for the padding, triu for the future.
    if tgt_lens.dim() != 1:
        raise ValueError(f"tgt_lens: expected (batch,), got {torch.Size(tgt_lens.shape)}")
    if bool((tgt_lens < 0).any()) or bool((tgt_lens > num_tokens).any()):
        raise ValueError(f"tgt_lens {tgt_lens.tolist()} out of range for num_tokens={num_tokens}")
    visible = valid_mask(tgt_lens, num_tokens, num_tokens)
    future = torch.ones(num_tokens, num_tokens, dtype=torch.bool).triu(diagonal=1)
    return ~visible | future


@alternatives.keep("d2l's valid lengths",
                   "d2l's conventions: per-query valid lengths i + 1 capped by the "
"sequence's length, then a sequence_mask")
def _mask_alt_d2l(tgt_lens, num_tokens):
    # d2l's convention: a mask is built from valid lengths (sequence_mask, True = kept). During
    # training d2l's decoder gives query i the valid length i + 1 (it sees itself and what came
    # before); here that length is also capped by the sequence's own length.
    if tgt_lens.dim() != 1:
        raise ValueError(f"tgt_lens should be (batch_size,), but tgt_lens.shape = {tuple(tgt_lens.shape)}")
    if (tgt_lens < 0).any() or (tgt_lens > num_tokens).any():
        raise ValueError(f"valid lengths tgt_lens={tgt_lens.tolist()} must be within 0..{num_tokens} (num_tokens)")
    batch_size = tgt_lens.shape[0]
    dec_valid_lens = torch.arange(1, num_tokens + 1).repeat(batch_size, 1)        # (batch_size, num_steps)
    dec_valid_lens = torch.minimum(dec_valid_lens, tgt_lens[:, None])
    maxlen = num_tokens
    kept = torch.arange(maxlen, dtype=torch.float32)[None, None, :] < dec_valid_lens[:, :, None]
    return ~kept


@alternatives.keep("Annotated Transformer's subsequent_mask",
                   "the Annotated Transformer's conventions: "
"True = may attend, subsequent_mask & padding, inverted at the end")
def _mask_alt_annotated(tgt_lens, num_tokens):
    # The Annotated Transformer's convention: a "subsequent mask" that is True where attention is
    # allowed, combined with the padding by "&"; our contract wants the opposite, so it is inverted.
    if tgt_lens.ndim != 1:
        raise ValueError("tgt_lens: expected a 1-D tensor, got one of shape " + str(list(tgt_lens.size())))
    if tgt_lens.numel() > 0 and (tgt_lens.max().item() > num_tokens or tgt_lens.min().item() < 0):
        raise ValueError("tgt_lens has a length outside [0, %d] (num_tokens = %d)" % (num_tokens, num_tokens))
    attn_shape = (1, num_tokens, num_tokens)
    subsequent_mask = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8) == 0
    tgt = torch.arange(num_tokens).unsqueeze(0).expand(len(tgt_lens), -1)
    not_pad = (tgt < tgt_lens.unsqueeze(-1)).unsqueeze(-2)                       # (batch, 1, num_tokens)
    tgt_mask = not_pad & subsequent_mask
    return tgt_mask == 0


@alternatives.keep("float tril and einsum",
                   "0/1 lower triangle times 0/1 valid keys, hidden where 0")
def _mask_alt_float_tril(tgt_lens, num_tokens):
    # Visible = lower triangle times a 0/1 row of valid keys; hidden = where that product is 0.
    if len(tgt_lens.shape) != 1:
        raise ValueError("tgt_lens must be 1-D, got shape %s" % "x".join(map(str, tgt_lens.shape)))
    if tgt_lens.numel() and not (0 <= tgt_lens.min().item() and tgt_lens.max().item() <= num_tokens):
        raise ValueError(f"a length in tgt_lens exceeds num_tokens={num_tokens} or is negative")
    lower = torch.tril(torch.ones(num_tokens, num_tokens))
    keys_ok = (torch.arange(num_tokens).float()[None, :] < tgt_lens.float()[:, None]).float()
    return torch.einsum("ij,bj->bij", lower, keys_ok) == 0


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch08_ex1", title="The decoder's combined padding and causal mask", name="decoder_self_mask",
    reference=decoder_self_mask, points=2,
    checks=[
        Check("3 targets of lengths 5, 3 and 1 padded to 5 tokens", _mask_main_calls, hint=_MASK_HINT),
        Check("unpadded targets (the plain causal mask), an empty target, a single token", _mask_edge_calls,
              hint=_MASK_HINT),
        Check("tgt_lens not 1-D (a row, a column, 0-d) or out of range (too large, negative) raises ValueError "
              "naming it", _mask_bad_calls,
              must_mention=_mask_mention, hint=_MASK_ERROR_HINT, weight=0.5),
        Check("random batches and lengths (hidden)", _mask_hidden_calls, public=False, hint=_MASK_HINT),
        Check("a length above num_tokens, a negative length, a (batch, 1) column (hidden)",
              _mask_hidden_bad_calls, public=False,
              must_mention=_mask_mention, hint=_MASK_ERROR_HINT, weight=0.25),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
