r"""ch05_ex6: How far a mask lets information travel through a stack of layers.

The leak test of this chapter bumps one token and records which outputs of **one** layer move.
Models stack many layers, and a token that reaches a neighbour in the first layer reaches that
neighbour's neighbours in the second. Work out, without running any layer, which outputs of a
stack can depend on which inputs. Write `stacked_influence(allowed, num_layers, residual=True)`.

- `allowed`: a `torch.bool` tensor `(n, n)`, `n >= 1`, where `allowed[i, j]` is `True` when
  query `i` may attend to key `j`. This is the **opposite** of the chapter's masks, where `True`
  marks a hidden key. Every layer of the stack uses this same pattern. A query with no allowed
  key takes nothing from the keys (its attention output is zero).
- `num_layers`: a Python int, `num_layers >= 0`. `residual`: a Python bool. Every layer is
  single-head attention over the same pattern: from its input rows `x_m` it forms the query
  `x_i W_q`, keys `x_k W_k` and values `x_k W_v`, takes the softmax over the allowed keys of row
  `i` and returns the weighted sum of their values, plus `x_i` itself when `residual` is `True`.
- Return a `torch.bool` tensor `(n, n)` whose entry `[i, j]` is `True` when a chain of
  `num_layers` one-layer steps leads from position `j` to position `i`. In one layer, output `i`
  takes from input `k` when `allowed[i, k]` (through its key and value), and from input `i`
  itself when `residual` is `True` **or** when its query can change the weights: a row with no
  allowed key outputs zero and a row with exactly one allowed key gives it weight 1 whatever the
  query, so only a row with two or more allowed keys depends on its own query. With
  `num_layers = 0` the result is the identity. These are the tokens output `i` of the stack
  *can* depend on. With `residual=True` a real stack with random weights depends on exactly
  these, and one check differentiates such a stack (float64, random weights, your mask) and
  compares. Without residual the rule is an upper bound: a real stack can lose a dependence in
  degenerate cases (a row with no allowed key outputs exact zeros, and two rows that copy the
  same single key output equal vectors, whose scores then tie). The checks go up to `n = 48`
  and `num_layers = 200`.
- Raise `ValueError` naming `allowed` and its shape when `allowed` is not a square 2-D tensor.

When your function passes, use it in a cell of your own on a sliding window in which each of
30 tokens sees itself and the 2 tokens before it: how far back does the last output reach
after 1, 2, ..., 5 layers? Then answer without building any mask: a model whose layers each let
a token see itself and the 4,095 tokens before it has 32 layers. How far back can the output
at the last position depend on the input?
"""
from __future__ import annotations

import numpy as np
import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept, gen, randint, shape_of
from ._common import _compare_entries, _compare_with_a_real_stack, _moved_in_a_stack  # noqa: F401

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def stacked_influence(allowed, num_layers, residual=True):
    """Reference: one boolean step per layer, out[i, j] = any over k of step[i, k] and reach[k, j],
    stopping once a layer changes nothing (reach is then the same after every further layer)."""
    if allowed.dim() != 2 or allowed.shape[0] != allowed.shape[1]:
        raise ValueError(f"allowed must be a square (n, n) mask, got allowed of shape {tuple(allowed.shape)}")
    n = allowed.shape[0]
    step = _one_layer(allowed.bool(), residual)
    reach = torch.eye(n, dtype=torch.bool)
    for _ in range(num_layers):
        following = (step[:, :, None] & reach[None, :, :]).any(dim=1)
        if torch.equal(following, reach):
            break
        reach = following
    return reach


def _one_layer(allowed, residual):
    """step[i, k]: output i of one layer can depend on input k (key and value when allowed; its own
    input through the residual path, or through its query when the query can shift the weights)."""
    stays = torch.full((allowed.shape[0],), bool(residual)) | (allowed.sum(dim=1) >= 2)
    return allowed | torch.diag(stays)


def _reach(step, num_layers):
    """Whether a chain of num_layers steps of ``step`` leads from token j to output i."""
    reach = torch.eye(step.shape[0], dtype=torch.bool)
    for _ in range(num_layers):
        reach = (step[:, :, None] & reach[None, :, :]).any(dim=1)
    return reach


# Inputs of the public and hidden checks ---------------------------------------------------


def _band(n, back, ahead=0):
    """allowed[i, j] True when i - back <= j <= i + ahead (back = width - 1 for a sliding window)."""
    offset = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    return (offset >= -back) & (offset <= ahead)


# Each public check's own case is what its seed (0) gives, and what a release ships; at a grading
# seed the same kind of case is drawn from that seed: the same graph with its tokens relabelled
# (allowed[perm][:, perm], so every answer is relabelled the same way) where the hint names no
# position, otherwise another size of the same pattern, other layer counts or another extra key.

def _relabelled(seed, n, keep=()):
    """A permutation of range(n) drawn from ``seed``, never the identity, that maps the positions in
    ``keep`` among themselves (so that a hint naming them stays true)."""
    g = gen(seed)
    rest = [i for i in range(n) if i not in keep]
    while True:
        perm = list(range(n))
        for group in (list(keep), rest):
            for i, j in zip(group, torch.randperm(len(group), generator=g).tolist()):
                perm[i] = group[j]
        if perm != list(range(n)):
            return torch.tensor(perm)


def _relabel(allowed, perm):
    return allowed[perm][:, perm].contiguous()


def _causal_calls(seed):
    causal = _band(6, back=5)
    if seed != 0:
        causal = _relabel(causal, _relabelled(seed, 6))
    return [Call(args=(causal, 1)), Call(args=(causal, 2)), Call(args=(causal, 4)),
            Call(args=(causal, 3), kwargs={"residual": False})]


def _window_calls(seed):
    width3, width4 = _band(12, back=2), _band(12, back=3)
    if seed != 0:
        perm = _relabelled(seed, 12)
        width3, width4 = _relabel(width3, perm), _relabel(width4, perm)
    return [Call(args=(width3, layers)) for layers in (1, 2, 3, 5)] + [
        Call(args=(width4, 2), kwargs={"residual": False})]


def _future_calls(seed):
    one_ahead = _band(10, back=9, ahead=1)
    if seed != 0:
        one_ahead = _relabel(one_ahead, _relabelled(seed, 10))
    return [Call(args=(one_ahead, 2)), Call(args=(one_ahead, 3)),
            Call(args=(one_ahead, 3), kwargs={"residual": False})]


def _other_size(seed, public, low, high):
    """``public`` at seed 0; otherwise a size in [low, high] other than ``public``, drawn from ``seed``."""
    if seed == 0:
        return public
    size = public
    g = gen(seed)
    while size == public:
        size = randint(g, low, high)
    return size


def _previous_calls(seed):
    n = _other_size(seed, 8, 5, 14)
    previous = _band(n, back=1) & ~torch.eye(n, dtype=torch.bool)   # token i sees token i - 1 only
    return [Call(args=(previous, layers), kwargs={"residual": False}) for layers in (0, 1, 3)] + [
        Call(args=(previous, 3))]


def _two_before_calls(seed):
    n = _other_size(seed, 7, 4, 12)
    two_before = _band(n, back=2) & ~torch.eye(n, dtype=torch.bool)   # tokens i - 2 and i - 1, not i
    return [Call(args=(two_before, layers), kwargs={"residual": False}) for layers in (1, 2)]


def _cycle_calls(seed):
    # Layer counts up to 12, some beyond the number of tokens and not a multiple of it, so that the
    # information has gone round and on; over 6 tokens, one extra key besides the cycle's.
    layers, (row, key), six_layers = (3, 7, 12), (3, 0), 7
    if seed != 0:
        g = gen(seed)
        while (layers, (row, key), six_layers) == ((3, 7, 12), (3, 0), 7):
            layers = (randint(g, 3, 5), randint(g, 6, 9), randint(g, 11, 12))
            row = randint(g, 0, 5)
            key = (row + randint(g, 1, 4)) % 6                             # neither row nor row - 1
            six_layers = randint(g, 7, 11)
    cycle = torch.roll(torch.eye(5, dtype=torch.bool), shifts=-1, dims=1)   # token i sees i - 1, mod 5
    six = torch.roll(torch.eye(6, dtype=torch.bool), shifts=-1, dims=1)
    six[row, key] = True                                                   # and one extra key
    return [Call(args=(cycle, count), kwargs={"residual": False}) for count in layers] + [
        Call(args=(six, six_layers), kwargs={"residual": False})]


def _empty_rows_calls(seed):
    holes = _band(7, back=6)
    holes[2] = False
    holes[5] = False
    if seed != 0:   # queries 2 and 5 stay the ones without a key
        holes = _relabel(holes, _relabelled(seed, 7, keep=(2, 5)))
    return [Call(args=(holes, 1), kwargs={"residual": False}), Call(args=(holes, 2), kwargs={"residual": False}),
            Call(args=(holes, 2))]


def _prefix_lm(n, prefix):
    """The prefix tokens see each other both ways; the rest see the prefix and their past."""
    allowed = _band(n, back=n)
    allowed[:prefix, :prefix] = True
    return allowed


def _deep_calls(seed):
    prefix_lm, causal = _prefix_lm(48, 40), _band(48, back=47)
    if seed != 0:
        perm = _relabelled(seed, 48)
        prefix_lm, causal = _relabel(prefix_lm, perm), _relabel(causal, perm)
    return [Call(args=(prefix_lm, 60)), Call(args=(prefix_lm, 200)),
            Call(args=(causal, 200), kwargs={"residual": False})]


def _random_mask(g, n, density):
    return torch.rand(n, n, generator=g) < density


def _stack_calls(seed):
    g = gen(seed)
    # With residual=True only: without it the chain rule is an upper bound (see the contract).
    return [Call(args=(_random_mask(g, 6, 0.35), 2)), Call(args=(_random_mask(g, 7, 0.25), 3))]


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _ in range(3):
        n = randint(g, 2, 12)
        density = 0.1 + 0.4 * torch.rand(1, generator=g).item()
        residual = bool(randint(g, 0, 1))
        calls.append(Call(args=(_random_mask(g, n, density), randint(g, 0, 5)), kwargs={"residual": residual}))
    n = randint(g, 30, 48)
    deep = _band(n, back=n) & (torch.rand(n, n, generator=g) < 0.8)     # causal, with random holes
    calls.append(Call(args=(deep, randint(g, 60, 200))))
    return calls


def _bad_calls(seed):
    if seed == 0:
        return [Call(args=(_band(4, back=1), 1)),
                Call(args=(torch.ones(3, 4, dtype=torch.bool), 2)),
                Call(args=(torch.ones(2, 5, 5, dtype=torch.bool), 1))]
    # The same shapes (the hint names them): the valid mask relabelled, random entries in the others.
    g = gen(seed)
    return [Call(args=(_relabel(_band(4, back=1), _relabelled(seed, 4)), 1)),
            Call(args=(torch.rand(3, 4, generator=g) < 0.5, randint(g, 1, 3))),
            Call(args=(torch.rand(2, 5, 5, generator=g) < 0.5, randint(g, 1, 3)))]


def _bad_words(call):
    return ["allowed", shape_of(call.args[0])]


# Kept mistakes, each with its hint --------------------------------------------------------


def _validated(impl):
    def answer(allowed, num_layers, residual=True):
        if allowed.dim() != 2 or allowed.shape[0] != allowed.shape[1]:
            raise ValueError(f"allowed should be square, got shape {tuple(allowed.shape)}")
        return impl(allowed, num_layers, residual)
    return answer


mistakes.add("allowed read as hidden",
             "your result treats True in allowed as a key that is hidden (the convention of the chapter's "
             "masks); in this exercise True marks a key the query may attend to.",
             _validated(lambda allowed, layers, residual: stacked_influence(~allowed, layers, residual)))

mistakes.add("transposed",
             "rows and columns are swapped: entry [i, j] says whether output i depends on input token j, and "
             "your result has that answer in entry [j, i] (information flows from keys to queries).",
             _validated(lambda allowed, layers, residual: stacked_influence(allowed, layers, residual).T))

mistakes.add("residual ignored",
             "with residual=True your result is what a stack without residual connections gives; each layer's "
             "output i also carries its input i, so a position can stay in place for some layers and move in "
             "others.",
             _validated(lambda allowed, layers, residual: stacked_influence(allowed, layers, False)))

mistakes.add("residual counted once",
             "your result lets a position stay in place either for every layer or for none; each layer has "
             "its own residual connection, so a chain may stay in place for some layers and attend in the others.",
             _validated(lambda allowed, layers, residual: stacked_influence(allowed, layers, False)
                        | (torch.eye(allowed.shape[0], dtype=torch.bool) & bool(residual))))

mistakes.add("query path ignored",
             "without residual your result lets output i depend on its own token only when allowed[i, i]; its "
             "query x_i W_q decides how the weights split, so wherever row i allows two or more keys, output i of "
             "a layer depends on input i as well.",
             _validated(lambda allowed, layers, residual: _reach(
                 allowed | (torch.eye(allowed.shape[0], dtype=torch.bool) & bool(residual)), layers)))

mistakes.add("own token always kept",
             "with residual=False your result lets every output depend on its own token in every layer (the "
             "same as counting chains of at most num_layers steps); without the residual path a row with no "
             "allowed key outputs zero and a row with one allowed key gives it weight 1 whatever the query, so "
             "there output i depends on input i only if allowed[i, i], and a chain has exactly num_layers steps.",
             _validated(lambda allowed, layers, residual: _reach(
                 allowed | torch.eye(allowed.shape[0], dtype=torch.bool), layers)))

mistakes.add("stopped after n layers",
             "your result stops changing after n layers (or n - 1), but without residual the reach need not "
             "settle: on a cycle (each token sees the one before it, the first sees the last) it moves by one "
             "position per layer for ever. Compute exactly num_layers steps, or stop only when a layer changes "
             "nothing.",
             _validated(lambda allowed, layers, residual: stacked_influence(
                 allowed, min(layers, allowed.shape[0]), residual)))

mistakes.add("one layer too many",
             "your result reaches one step further than the stack can: it is the answer for num_layers + 1 "
             "layers (with 0 layers, each output depends on its own token only).",
             _validated(lambda allowed, layers, residual: stacked_influence(allowed, layers + 1, residual)))

mistakes.add("one layer too few",
             "your result is the answer for num_layers - 1 layers: one layer already lets output i depend on "
             "the keys query i may attend to.",
             _validated(lambda allowed, layers, residual: stacked_influence(allowed, max(layers - 1, 0), residual)))


@mistakes.keep("path counts overflow",
               "with many layers your result misses dependences that exist: the number of paths outgrows any "
               "number type (a float overflows to inf and inf times 0 gives nan, an integer wraps around to a "
               "negative count), and a comparison with nan or a negative count is False; only whether a path "
               "exists matters, so keep 0 or 1 per entry after every layer.")
def _influence_float_power(allowed, num_layers, residual=True):
    if allowed.dim() != 2 or allowed.shape[0] != allowed.shape[1]:
        raise ValueError(f"allowed must be square, got shape {tuple(allowed.shape)}")
    step = allowed.float()
    diagonal = torch.tensor([bool(residual) or int(row.sum()) >= 2 for row in allowed])
    step = step + torch.diag(diagonal.float()) * (1 - step)
    return torch.linalg.matrix_power(step, num_layers) > 0


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("Python ints as bit sets",
                   "plain loops: bit j of reach[i] says output i depends on token j; one pass over the allowed "
                   "keys per layer")
def _influence_alt_bitsets(allowed, num_layers, residual=True):
    if len(allowed.shape) != 2 or allowed.shape[0] != allowed.shape[1]:
        raise ValueError("expected a square allowed, got %s" % (list(allowed.shape),))
    n = allowed.shape[0]
    sees = [[k for k in range(n) if allowed[i, k]] for i in range(n)]
    reach = [1 << i for i in range(n)]
    for _ in range(num_layers):
        keeps = [residual or len(sees[i]) >= 2 for i in range(n)]   # residual, or a query that moves weights
        reach = [(reach[i] if keeps[i] else 0) | _or_all(reach[k] for k in sees[i]) for i in range(n)]
    return torch.tensor([[bool(reach[i] >> j & 1) for j in range(n)] for i in range(n)], dtype=torch.bool)


def _or_all(numbers):
    total = 0
    for number in numbers:
        total |= number
    return total


@alternatives.keep("numpy boolean matrix_power",
                   "numpy's matmul on bool arrays is OR of ANDs, so matrix_power never counts paths")
def _influence_alt_numpy(allowed, num_layers, residual=True):
    if allowed.ndim != 2 or allowed.shape[0] != allowed.shape[1]:
        raise ValueError(f"allowed has shape {tuple(allowed.shape)}; expected (n, n)")
    step = allowed.numpy().astype(bool)
    keeps_own = step.sum(axis=1) >= 2          # the query moves the weights only between two keys or more
    if residual:
        keeps_own[:] = True
    step = step | np.diag(keeps_own)
    return torch.from_numpy(np.linalg.matrix_power(step, num_layers).astype(bool))


@alternatives.keep("float64 einsum clipped to 0/1",
                   "one einsum per layer in float64, clipped back to 0 or 1 so that nothing grows")
def _influence_alt_einsum(allowed, num_layers, residual=True):
    if allowed.dim() != 2 or allowed.size(0) != allowed.size(1):
        raise ValueError(f"allowed: need shape (n, n), got {list(allowed.shape)}")
    step = allowed.double()
    own = torch.ones(len(step), dtype=torch.float64) if residual else (step.sum(dim=1) >= 2).double()
    step = torch.maximum(step, torch.diag(own))
    reach = torch.eye(len(step), dtype=torch.float64)
    for _ in range(num_layers):
        reach = torch.einsum("ik,kj->ij", step, reach).clamp(max=1.0)
    return reach > 0.5


@alternatives.keep("the chapter's convention, float32 per layer",
                   "True = hidden inside, as in the chapter; one float32 product per layer thresholded to 0/1, "
                   "every layer computed")
def _influence_alt_hidden_float32(allowed, num_layers, residual=True):
    if allowed.dim() != 2 or allowed.shape[0] != allowed.shape[1]:
        raise ValueError(f"allowed must be (n, n); its shape is {tuple(allowed.shape)}")
    hidden = ~allowed
    n = hidden.shape[0]
    own_query_counts = (~hidden).sum(dim=-1) >= 2
    if residual or own_query_counts.any():
        hidden = hidden & ~torch.diag(own_query_counts | residual)
    step = (~hidden).float()
    result = torch.eye(n)
    for _ in range(num_layers):
        result = ((step @ result) > 0).float()
    return result.bool()


@alternatives.keep("repeated squaring in int64",
                   "binary powers of the one-layer pattern, each product of 0/1 int64 matrices turned back into "
                   "0/1 at once")
def _influence_alt_squaring(allowed, num_layers, residual=True):
    if allowed.dim() != 2 or allowed.shape[-1] != allowed.shape[-2]:
        raise ValueError(f"allowed is not square: shape {tuple(allowed.shape)}")
    n = allowed.shape[0]
    power = allowed.long()
    power = power | torch.diag(((power.sum(dim=1) >= 2) | bool(residual)).long())
    result = torch.eye(n, dtype=torch.long)
    remaining = num_layers
    while remaining > 0:
        if remaining % 2:
            result = (power @ result).clamp(max=1)
        power = (power @ power).clamp(max=1)
        remaining //= 2
    return result == 1


# Registration -----------------------------------------------------------------------------

_HINT = ("entry [i, j] is True when a chain of num_layers one-layer steps leads from token j to output i; in one "
         "layer output m depends on input k when allowed[m, k], and on input m itself with residual=True or when "
         "row m allows two or more keys (its query then moves the weights).")

register(Exercise(
    label="ch05_ex6", title="How far a mask lets information travel through a stack of layers",
    name="stacked_influence", reference=stacked_influence, points=3, kind="function",
    checks=[
        Check("causal mask over 6 tokens, 1 to 4 layers, with and without residual", _causal_calls,
              compare=_compare_entries, hint=_HINT),
        Check("sliding windows of width 3 and 4 over 12 tokens, up to 5 layers", _window_calls,
              compare=_compare_entries,
              hint=_HINT + " A window that reaches w - 1 tokens back reaches further back with every layer."),
        Check("a mask that also shows the next token, 2 and 3 layers", _future_calls,
              compare=_compare_entries,
              hint=_HINT + " Here every query also sees the token right after it."),
        Check("previous token only, 0, 1 and 3 layers, with and without residual", _previous_calls,
              compare=_compare_entries,
              hint=_HINT + " Here each query sees the token before it and not itself, one key per row, and the "
                           "first sees nothing; with num_layers=0 every output is its own token."),
        Check("the two tokens before, not itself, without residual", _two_before_calls,
              compare=_compare_entries,
              hint=_HINT + " Here query 0 sees no key, query 1 one key and every later query two keys."),
        Check("a cycle of 5 and 6 tokens, 3 to 12 layers, without residual", _cycle_calls,
              compare=_compare_entries,
              hint=_HINT + " Here token i sees token i - 1 and token 0 sees the last one, so without residual "
                           "the information goes round and round: after 7 layers over 5 tokens it has moved by 7."),
        Check("two queries with no allowed key", _empty_rows_calls,
              compare=_compare_entries,
              hint=_HINT + " Here queries 2 and 5 may attend to no key at all: without residual their outputs "
                           "are zero."),
        Check("48 tokens, 60 and 200 layers", _deep_calls,
              compare=_compare_entries,
              hint=_HINT + " Here the stack is deep: the number of paths runs far beyond the range of any "
                           "number type."),
        # Public: judged against the reference's outcomes (a release ships them, not the autograd routine
        # that finds them); the hidden check below judges a wrong entry by a real stack's Jacobian.
        Check("random masks against a real stack of float64 attention layers with residual", _stack_calls,
              compare=_compare_entries,
              hint="this check runs a stack of random attention layers with the mask and records which "
                   "outputs change when an input token changes (their derivatives); entry [i, j] of the result "
                   "should be True exactly when output i changes with token j."),
        Check("allowed not a square 2-D tensor raises ValueError naming allowed and its shape", _bad_calls,
              must_mention=_bad_words, weight=ERROR_WEIGHT,
              hint="the first call is a valid mask; the others have shapes (3, 4) and (2, 5, 5), and the "
                   "ValueError message names allowed and its shape."),
        Check("random masks and sizes, and a deep causal stack with holes (hidden)", _hidden_calls,
              compare=_compare_entries, public=False, hint=_HINT),
        Check("random masks against a real stack of float64 attention layers (hidden)", _stack_calls, seed=7,
              compare=_compare_with_a_real_stack, public=False,
              hint="entry [i, j] should be True exactly when output i of a stack of attention layers with this "
                   "mask changes when token j changes."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
