r"""ch06_ex7: A head that finds earlier copies of its token.

Set the weights of one head by hand, as the section on what the heads attend to does, for a rule
that section does not build. A sequence of `n` tokens with ids `t_0, ..., t_(n-1)` in
`range(vocab_size)`, `2 <= n <= context_length`, enters the layer as `x` of shape
`(1, n, vocab_size + context_length)`: row `p` of `x` is the one-hot code of `t_p` in the first
`vocab_size` columns, followed by the one-hot code of the position `p` in the last
`context_length` columns (the chapter's layout: word code, then position code).

Write `earlier_copy_head(vocab_size, context_length, head_dim)` (Python `int`s with
`vocab_size >= 2`, `context_length >= 2` and `head_dim >= vocab_size + context_length`) that
returns the tuple `(W_query, W_key)` of two float tensors, to be loaded as the weights
`W_query.weight` and `W_key.weight` of this chapter's one-head layer
`MultiHeadAttention(vocab_size + context_length, head_dim, context_length, dropout=0.0,
num_heads=1)` (so in the layout of an `nn.Linear`; the value and output projections play no
part). In the attention weights of that layer (its scores divided by the square root of
`head_dim`, the causal mask, the softmax over the keys), for every such sequence:

- a query at position `p` whose token occurred earlier (`t_j == t_p` for some `j < p`) puts more
  than 0.99 of its weight, in total, on those earlier positions (split among them as you like);
- a query whose token did not occur earlier (the first token, for one) puts more than 0.99 of its
  weight on itself.

The checks compute the layer's attention weights from your two tensors on many sequences of
lengths up to `context_length` (every token the same, all different, random ones with repeats),
with `vocab_size` up to 8 and `context_length` up to 16.
"""
from __future__ import annotations

import math

import torch

from ...checks.checking import is_stub, stub_reason
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint, shape_of
from ._common import _PUBLIC_SEED

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)

THRESHOLD = 0.99


# The reference ----------------------------------------------------------------------------


def _margin(context_length):
    # e^-margin against up to context_length keys stays far below 1 - THRESHOLD.
    return math.log(100.0 * context_length) + 1.0


def _copy_head(vocab_size, context_length, head_dim, word, self_penalty):
    """Raw (unscaled) scores: `word` for the same token, minus `self_penalty` for the same position."""
    d_in = vocab_size + context_length
    W_query, W_key = torch.zeros(head_dim, d_in), torch.zeros(head_dim, d_in)
    for i in range(d_in):
        W_key[i, i] = 1.0
        W_query[i, i] = word if i < vocab_size else -self_penalty
    return W_query, W_key


def earlier_copy_head(vocab_size, context_length, head_dim):
    """(W_query, W_key) of shape (head_dim, vocab_size + context_length)."""
    m = _margin(context_length) * math.sqrt(head_dim)   # the layer divides the scores by sqrt(head_dim)
    # Scaled scores: 2m for an earlier copy, 2m - m for the token itself, 0 for any other token.
    return _copy_head(vocab_size, context_length, head_dim, 2 * m, m)


# Inputs of the public and hidden checks ---------------------------------------------------


def _sizes(g, vocab, context):
    v, c = randint(g, *vocab), randint(g, *context)
    return v, c, v + c + randint(g, 1, 6)


def _chapter_calls(seed):
    # The chapter's layout: 5 words, 6 positions ("the cat sat on the mat"), head_dim 12.
    if seed == _PUBLIC_SEED:
        return [Call(args=(5, 6, 12))]
    return [Call(args=_sizes(gen(seed), (3, 8), (4, 12)))]


def _long_calls(seed):
    # Two words over 16 positions: long runs of copies.
    if seed == _PUBLIC_SEED:
        return [Call(args=(2, 16, 20))]
    return [Call(args=_sizes(gen(seed), (2, 3), (10, 16)))]


def _hidden_calls(seed):
    g = gen(seed)
    return [Call(args=_sizes(g, (2, 8), (2, 16))) for _ in range(3)]


def _probes(vocab_size, context_length):
    """The token sequences a call's weights are tried on (drawn from the call's sizes only)."""
    V, C = vocab_size, context_length
    g = gen(1000 * V + C)
    seqs = [[0] * C,                                    # every token the same
            [p % V for p in range(C)],                  # all different, then cycling
            [0] + [1] * (C - 2) + [0],                  # the last token copies only the first
            [1] * (C - 1) + [0]]                        # the last token is new, after C - 1 others
    if V >= 5 and C >= 6:
        seqs.append([0, 1, 2, 3, 0, 4])                 # the chapter's sentence
    for _ in range(8):
        n = randint(g, 2, C)
        seqs.append(torch.randint(0, randint(g, 2, V), (n,), generator=g).tolist())
    return seqs


def _attention(W_query, W_key, tokens, vocab_size, context_length):
    """The one-head layer's attention weights (n, n) on one sequence, in float32 as the layer computes."""
    return _attention_batch(W_query, W_key, [tokens], vocab_size, context_length)[0, :len(tokens), :len(tokens)]


def _attention_batch(W_query, W_key, sequences, vocab_size, context_length):
    """The weights (len(sequences), C, C) of sequences padded with empty rows to C = context_length:
    a padded position is only ever a query (the causal mask hides it as a key from real queries)."""
    C = context_length
    x = torch.zeros(len(sequences), C, vocab_size + C)
    for b, tokens in enumerate(sequences):
        n = len(tokens)
        x[b, torch.arange(n), torch.tensor(tokens)] = 1.0
        x[b, torch.arange(n), vocab_size + torch.arange(n)] = 1.0
    q, k = x @ W_query.float().T, x @ W_key.float().T
    scores = (q @ k.transpose(1, 2)) / math.sqrt(W_query.shape[0])
    scores = scores.masked_fill(torch.ones(C, C, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(dim=-1)


def _behaviour(outcome, call):
    """(problem, rows): a sentence on what is wrong with the returned weights themselves, or
    (probes, target, itself): for each query of each probe, its weight on its targets (its earlier
    copies, or itself at a first occurrence) and on itself, NaN at padded positions."""
    if outcome.get("status") != "ok":
        if is_stub(outcome):
            return stub_reason(f"NotImplementedError: {outcome.get('message')}"), None
        return f"raised {outcome.get('error_type')}: {str(outcome.get('message'))[:300]}", None
    value = outcome["value"]
    items = value.get("__seq__") if isinstance(value, dict) else None
    if items is None or len(items) != 2:
        return f"must return the tuple (W_query, W_key), got {value!r:.80}", None
    V, C, hd = call.args
    for name, w in zip(("W_query", "W_key"), items):
        if not isinstance(w, torch.Tensor):
            return f"{name} must be a tensor, got {w!r:.80}", None
        if tuple(w.shape) != (hd, V + C):
            return (f"{name} has shape {shape_of(w)}; the layer's {name}.weight has shape (head_dim, "
                    f"vocab_size + context_length) = ({hd}, {V + C})"), None
        if not bool(torch.isfinite(w.double()).all()):
            return f"{name} has entries that are not finite", None
    probes = _probes(V, C)
    weights = _attention_batch(items[0], items[1], probes, V, C).double()
    tokens = torch.full((len(probes), C), -1)
    for b, seq in enumerate(probes):
        tokens[b, :len(seq)] = torch.tensor(seq)
    earlier = (tokens[:, :, None] == tokens[:, None, :]) & torch.ones(C, C, dtype=torch.bool).tril(-1)
    itself = weights.diagonal(dim1=1, dim2=2)
    target = torch.where(earlier.any(-1), (weights * earlier).sum(-1), itself)
    real = tokens >= 0
    nan = torch.tensor(float("nan"), dtype=torch.float64)
    return None, (probes, torch.where(real, target, nan), torch.where(real, itself, nan))


def _first_miss(rows):
    probes, target, itself = rows
    misses = (~(target > THRESHOLD)) & ~target.isnan()
    if not bool(misses.any()):
        return None
    b, p = (int(i) for i in misses.nonzero()[0])
    tokens = probes[b]
    earlier = [j for j in range(p) if tokens[j] == tokens[p]]
    mass, own = target[b, p].item(), itself[b, p].item()
    where = f"in the sequence {tokens}, the query at position {p} (token {tokens[p]}"
    if earlier:
        return (f"{where}, seen before at positions {earlier}) puts {mass:.3f} of its weight on those "
                f"positions and {own:.3f} on itself; it must put more than {THRESHOLD} on the earlier copies")
    return (f"{where}, its first occurrence) puts {mass:.3f} of its weight on itself; it must put more "
            f"than {THRESHOLD} there")


def _compare_heads(got, want, calls):
    """Against the reference: every query's weight on its targets above THRESHOLD. Against a kept
    mistake (whose weights miss): the same problem, or the same weights on targets and on itself."""
    for i, (g, w, c) in enumerate(zip(got, want, calls)):
        at = "" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: "
        w_problem, w_rows = _behaviour(w, c)
        g_problem, g_rows = _behaviour(g, c)
        if w_problem is None and _first_miss(w_rows) is None:        # the reference (or a correct answer)
            miss = g_problem or _first_miss(g_rows)
            if miss:
                return at + miss
            continue
        if w_problem is not None or g_problem is not None:
            if g_problem != w_problem:
                return at + (g_problem or "behaves otherwise than the other answer")
            continue
        if not torch.allclose(torch.stack(g_rows[1:]), torch.stack(w_rows[1:]), rtol=0.0, atol=0.02,
                              equal_nan=True):
            return at + "its attention weights differ from the other answer's"
    return None


_HINT = ("this check builds x for each probe sequence (word code, then position code), computes the one-head "
         "layer's attention weights from your W_query and W_key (scores divided by the square root of "
         "head_dim, causal mask, softmax over the keys) and adds up each query's weight on its earlier "
         "copies, or on itself at a first occurrence.")


# Kept mistakes, each with its hint --------------------------------------------------------


@mistakes.keep("the token itself not held back",
               "your head gives a token's own position the same score as its earlier copies (the chapter's "
               "same-word head): a repeated token splits its weight between itself and its copies. The "
               "position codes can tell the token itself apart from the earlier ones.")
def _ech_no_self_penalty(vocab_size, context_length, head_dim):
    m = _margin(context_length) * math.sqrt(head_dim)
    return _copy_head(vocab_size, context_length, head_dim, 2 * m, 0.0)


@mistakes.keep("no scale: plain one-hot codes",
               "your scores have the right order but are far too close together: with codes of size 1 a "
               "match scores about 1 / sqrt(head_dim) above a miss, and the softmax spreads the weight over "
               "every visible key. The weights must be large enough that the wanted keys win by a margin "
               "that grows with the number of keys.")
def _ech_unscaled(vocab_size, context_length, head_dim):
    return _copy_head(vocab_size, context_length, head_dim, 2.0, 1.0)


@mistakes.keep("the division by sqrt(head_dim) left out",
               "your weights would be sharp enough if the layer did not divide the scores by the square root "
               "of head_dim; it does, so your margins shrink by that factor and the softmax is no longer "
               "sharp enough.")
def _ech_no_sqrt(vocab_size, context_length, head_dim):
    m = _margin(context_length)
    return _copy_head(vocab_size, context_length, head_dim, 2 * m, m)


@mistakes.keep("weights as (d_in, head_dim) for x @ W",
               "your tensors have shape (vocab_size + context_length, head_dim), the layout of x @ W; an "
               "nn.Linear stores its weight as (out_features, in_features) = (head_dim, vocab_size + "
               "context_length) and computes x @ weight.T.")
def _ech_transposed(vocab_size, context_length, head_dim):
    W_query, W_key = earlier_copy_head(vocab_size, context_length, head_dim)
    return W_query.T.contiguous(), W_key.T.contiguous()


@mistakes.keep("the self penalty cancels the match",
               "your penalty on the token's own position is as large as the bonus of the same word, so at a "
               "first occurrence the token itself scores no more than any other token and the weight spreads; "
               "the token itself must lose to its earlier copies but still beat every other token.")
def _ech_penalty_equals_match(vocab_size, context_length, head_dim):
    m = _margin(context_length) * math.sqrt(head_dim)
    return _copy_head(vocab_size, context_length, head_dim, 2 * m, 2 * m)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("a recency ramp in vocab_size + 1 dimensions",
                   "no position identity: the key of position j carries -c * j, the query a constant 1 (its "
                   "position code sums to 1), so later keys score less and the token itself, the latest, "
                   "loses to every earlier copy; the word bonus beats the ramp; float64 inside")
def _ech_alt_ramp(vocab_size, context_length, head_dim):
    V, C = vocab_size, context_length
    c = (math.log(100.0 * C) + 1.0)
    bonus = c * C + c
    s = math.sqrt(head_dim)
    W_query = torch.zeros(head_dim, V + C, dtype=torch.float64)
    W_key = torch.zeros(head_dim, V + C, dtype=torch.float64)
    W_query[:V, :V] = bonus * s * torch.eye(V, dtype=torch.float64)
    W_key[:V, :V] = torch.eye(V, dtype=torch.float64)
    W_query[V, V:] = s                                   # the constant 1 of every position code
    W_key[V, V:] = -c * torch.arange(C, dtype=torch.float64)
    return W_query, W_key


@alternatives.keep("a random rotation of both",
                   "the reference's head turned by one random orthogonal matrix R (QR of a seeded draw): "
                   "(R Wq)^T (R Wk) = Wq^T Wk, so every score is the same; the scale split evenly")
def _ech_alt_rotated(vocab_size, context_length, head_dim):
    d_in = vocab_size + context_length
    gain = (math.log(100.0 * context_length) + 1.0) * math.sqrt(head_dim)
    half = math.sqrt(gain)                               # gain = half * half, on each side
    base_q = torch.zeros(head_dim, d_in, dtype=torch.float64)
    base_k = torch.zeros(head_dim, d_in, dtype=torch.float64)
    base_q[:d_in, :d_in] = torch.diag(torch.tensor([2.0] * vocab_size + [-1.0] * context_length,
                                                   dtype=torch.float64)) * half
    base_k[:d_in, :d_in] = torch.eye(d_in, dtype=torch.float64) * half
    R, _ = torch.linalg.qr(torch.randn(head_dim, head_dim, dtype=torch.float64,
                                       generator=torch.Generator().manual_seed(head_dim)))
    return (R @ base_q).float(), (R @ base_k).float()


@alternatives.keep("fixed large scores, positions first, all on the key side",
                   "loops; the head's first dimensions hold the positions, the next the words; the query is "
                   "0/1 codes and the key carries +60 / -30 times sqrt(head_dim), far beyond what 16 keys need")
def _ech_alt_fixed(vocab_size, context_length, head_dim):
    V, C = vocab_size, context_length
    big = 30.0 * head_dim ** 0.5
    W_query = torch.zeros(head_dim, V + C)
    W_key = torch.zeros(head_dim, V + C)
    for p in range(C):
        W_query[p, V + p] = 1.0
        W_key[p, V + p] = -big
    for v in range(V):
        W_query[C + v, v] = 1.0
        W_key[C + v, v] = 2 * big
    return W_query, W_key


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch06_ex7", title="A head that finds earlier copies of its token", name="earlier_copy_head",
    reference=earlier_copy_head, points=2,
    checks=[
        Check("the chapter's layout: 5 words, 6 positions, head_dim 12", _chapter_calls,
              compare=_compare_heads, hint=_HINT),
        Check("2 words over 16 positions, head_dim 20", _long_calls, compare=_compare_heads, hint=_HINT),
        Check("random sizes (hidden)", _hidden_calls, public=False, compare=_compare_heads, hint=_HINT),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
