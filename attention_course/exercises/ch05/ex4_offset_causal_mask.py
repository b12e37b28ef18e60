"""ch05_ex4: A causal mask for queries that come last.

During generation with a key-value cache, the `num_queries` queries are the **last**
`num_queries` positions of a sequence of `num_keys` tokens: query `i` sits at position
`num_keys - num_queries + i`. Write `offset_causal_mask(num_queries, num_keys)` that returns a
`torch.bool` tensor of shape `(num_queries, num_keys)` whose entry `(i, j)` is `True` when key
`j` lies after the position of query `i` (so must not be attended to), `False` otherwise. With
`num_queries == num_keys` it is the ordinary causal mask. Both arguments are Python ints;
raise `ValueError` naming both `num_queries` and `num_keys` unless `1 <= num_queries <= num_keys`.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def offset_causal_mask(num_queries, num_keys):
    """Bool (num_queries, num_keys) mask for the LAST num_queries positions of num_keys tokens."""
    for value in (num_queries, num_keys):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"num_queries and num_keys must be integers, got "
                             f"num_queries={num_queries!r}, num_keys={num_keys!r}")
    if not 1 <= num_queries <= num_keys:
        raise ValueError(f"need 1 <= num_queries <= num_keys, got num_queries={num_queries}, "
                         f"num_keys={num_keys}")
    return torch.ones(num_queries, num_keys, dtype=torch.bool).triu(num_keys - num_queries + 1)


# Inputs of the public and hidden checks ---------------------------------------------------


# Each public check's own case is what its seed (0) gives; at a grading seed the same kind of case is
# drawn afresh from that seed, never the case a release ships.

def _offset_case(seed, public, draw):
    """``public`` (a list of (num_queries, num_keys)) at seed 0; otherwise ``draw(g)`` for a
    generator seeded from ``seed``, drawn again while it gives the public case."""
    pairs = public
    if seed != 0:
        g = torch.Generator().manual_seed(seed)
        while pairs == public:
            pairs = draw(g)
    return [Call(args=pair) for pair in pairs]


def _offset_size(g, low, high):
    return int(torch.randint(low, high + 1, (), generator=g))


def _offset_public_draw(g):
    # One query over several keys, some queries over more keys, a square mask.
    num_keys = _offset_size(g, 4, 9)
    return [(1, _offset_size(g, 3, 9)), (_offset_size(g, 2, num_keys - 1), num_keys),
            (_offset_size(g, 2, 7),) * 2]


def _offset_bad_draw(g):
    # More queries than keys, no query, no key.
    num_keys = _offset_size(g, 1, 8)
    return [(num_keys + _offset_size(g, 1, 4), num_keys), (0, _offset_size(g, 1, 8)), (_offset_size(g, 1, 6), 0)]


def _offset_public_calls(seed):
    return _offset_case(seed, [(1, 5), (3, 7), (4, 4)], _offset_public_draw)


def _offset_bad_calls(seed):
    return _offset_case(seed, [(5, 3), (0, 4), (2, 0)], _offset_bad_draw)


def _offset_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    calls = []
    for _ in range(3):
        num_keys = int(torch.randint(2, 30, (), generator=g))
        num_queries = int(torch.randint(1, num_keys + 1, (), generator=g))
        calls.append(Call(args=(num_queries, num_keys)))
    calls.append(Call(args=(num_keys - 1, num_keys)))  # nearly square: a different offset
    return calls


# Kept mistakes, each with its hint --------------------------------------------------------


def _offset_validated(make):
    def impl(num_queries, num_keys):
        if not 1 <= num_queries <= num_keys:
            raise ValueError(f"need 1 <= num_queries <= num_keys, got num_queries={num_queries}, "
                             f"num_keys={num_keys}")
        return make(num_queries, num_keys)
    return impl


mistakes.add("aligned top-left",
             "the mask is aligned top-left, as if the queries were the FIRST num_queries tokens; they "
             "are the last ones, so the new query sees every cached key.",
             _offset_validated(lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(1)))


mistakes.add("own position hidden",
             "each query's own position is hidden too: a query may attend to the key at its own "
             "position.",
             _offset_validated(lambda q, k: torch.ones(q, k, dtype=torch.bool).triu(k - q)))


mistakes.add("allowed positions marked",
             "the mask is inverted: True must mark the keys a query may NOT attend to.",
             _offset_validated(lambda q, k: ~torch.ones(q, k, dtype=torch.bool).triu(k - q + 1)))


mistakes.add("no validation",
             "more queries than keys (or a size below 1) must raise ValueError naming num_queries "
             "and num_keys.",
             lambda num_queries, num_keys: torch.ones(num_queries, num_keys, dtype=torch.bool)
             .triu(num_keys - num_queries + 1))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("position comparison",
                   "key positions compared with the queries' positions (arange)")
def _offset_alt_arange(num_queries, num_keys):
    if not (isinstance(num_queries, int) and isinstance(num_keys, int) and 0 < num_queries <= num_keys):
        raise ValueError(f"expected 0 < num_queries <= num_keys, got num_queries={num_queries}, num_keys={num_keys}")
    query_pos = torch.arange(num_keys - num_queries, num_keys)
    return torch.arange(num_keys)[None, :] > query_pos[:, None]


@alternatives.keep("last rows of the full mask",
                   "triu of a num_keys x num_keys mask, its last num_queries rows")
def _offset_alt_last_rows(num_queries, num_keys):
    # The last num_queries rows of the full causal mask of num_keys tokens.
    if num_queries < 1 or num_keys < num_queries:
        raise ValueError(f"num_queries ({num_queries}) must be between 1 and num_keys ({num_keys})")
    return torch.triu(torch.ones(num_keys, num_keys, dtype=torch.bool), diagonal=1)[num_keys - num_queries:]


@alternatives.keep("loops",
                   "a nested list comprehension, torch.tensor(dtype=bool)")
def _offset_alt_loops(num_queries, num_keys):
    if not 1 <= num_queries <= num_keys:
        raise ValueError("need 1 <= num_queries <= num_keys; num_queries=%d, num_keys=%d" % (num_queries, num_keys))
    offset = num_keys - num_queries
    return torch.tensor([[j > offset + i for j in range(num_keys)] for i in range(num_queries)], dtype=torch.bool)


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch05_ex4", title="A causal mask for queries that come last", name="offset_causal_mask",
    reference=offset_causal_mask, points=1,
    checks=[
        Check("1 query over 5 keys, 3 over 7, 4 over 4", _offset_public_calls,
              hint="query i sits at position num_keys - num_queries + i of the sequence; it may see every "
                   "key up to and including that position."),
        Check("invalid sizes raise ValueError naming num_queries and num_keys", _offset_bad_calls,
              must_mention=["num_queries", "num_keys"], weight=0.4,
              hint="require 1 <= num_queries <= num_keys and name both arguments in the message."),
        Check("random sizes (hidden)", _offset_hidden_calls, public=False,
              hint="query i sits at position num_keys - num_queries + i of the sequence; it may see every "
                   "key up to and including that position."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
