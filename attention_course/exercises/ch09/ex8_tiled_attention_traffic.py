r"""ch09_ex8: Main-memory traffic of tiled attention, counted exactly.

Count, without running anything, the bytes that the forward pass of tiled attention reads from
main memory and writes to it, for one head, in the model of a fused kernel below. The page bounds
this traffic by $\Theta(N^2 d^2 / M)$ with the constants dropped; here you count it exactly. Write
`tiled_attention_traffic(num_queries, num_keys, head_dim, block_q, block_k, bytes_per_value,
causal=False, keys_outside=False)`, where the first six arguments are positive Python `int`s and
the last two are `bool`s. Return the `dict` `{"reads": ..., "writes": ...}` of two Python `int`s,
numbers of bytes.

The model:

- The queries are cut into blocks of `block_q` rows and the keys and values into blocks of
  `block_k` rows, from the first row on; the last block of each may be shorter. A tile is one block
  of queries against one block of keys. Queries, keys, values and outputs have `head_dim` numbers
  per row, each of `bytes_per_value` bytes; the statistics (the running maximum `m`, the running
  sum `l` and the log-sum-exp) are float32, 4 bytes per number, one number per query.
- With `causal=True` (and then `num_queries <= num_keys`), the queries come last: query `i` sees
  the keys at positions `0 ... num_keys - num_queries + i`. A tile none of whose (query, key) pairs
  is visible is skipped: it reads and writes nothing. Without the mask every tile is computed.
- With `keys_outside=False` (FlashAttention-2's order, the page's loop), the outer loop runs over
  the query blocks. A query block's queries are read once, and they, its `m`, its `l` and its
  unnormalised output stay on chip while the inner loop visits the key blocks; each computed tile
  reads its block of keys and its block of values. When the inner loop ends, the block's output
  rows and its log-sum-exp (one per query) are written.
- With `keys_outside=True` (FlashAttention's first order), the outer loop runs over the key
  blocks. A key block's keys and values are read once and stay on chip while the inner loop visits
  the query blocks. Each computed tile reads its block of queries and that block's state (its output
  rows, `m` and `l`), updates the state and writes it back; only a query block's first computed
  tile reads no state, since it starts from `m = -inf`, `l = 0` and a zero output. This order
  writes no log-sum-exp: the state it writes back is all that leaves the chip.

Nothing else is read or written: the scores and the weights never leave the chip.
"""
from __future__ import annotations

import torch

from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint
from ._common import compare_types as _compare_types

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)

STATS_BYTES = 4          # m, l and the log-sum-exp are float32


# The reference ----------------------------------------------------------------------------


def _spans(n, block):
    """(start, stop) of each block of ``block`` rows over ``n`` rows; the last may be shorter."""
    return [(start, min(start + block, n)) for start in range(0, n, block)]


def tiled_attention_traffic(num_queries, num_keys, head_dim, block_q, block_k, bytes_per_value,
                            causal=False, keys_outside=False):
    """Bytes read from and written to main memory by one head's tiled forward pass."""
    offset = num_keys - num_queries            # query i sits at position offset + i
    row = head_dim * bytes_per_value           # one row of queries, keys, values or outputs
    state = row + 2 * STATS_BYTES              # output row, m and l of one query

    def computed(q_span, k_span):
        return not causal or k_span[0] <= offset + q_span[1] - 1    # the block's last query sees most

    q_spans, k_spans = _spans(num_queries, block_q), _spans(num_keys, block_k)
    reads = writes = 0
    if not keys_outside:
        for q_span in q_spans:
            rows = q_span[1] - q_span[0]
            reads += rows * row
            for k_span in k_spans:
                if computed(q_span, k_span):
                    reads += 2 * (k_span[1] - k_span[0]) * row
            writes += rows * (row + STATS_BYTES)
    else:
        started = set()
        for k_span in k_spans:
            reads += 2 * (k_span[1] - k_span[0]) * row
            for q_span in q_spans:
                if not computed(q_span, k_span):
                    continue
                rows = q_span[1] - q_span[0]
                reads += rows * row + (rows * state if q_span in started else 0)
                writes += rows * state
                started.add(q_span)
    return {"reads": reads, "writes": writes}


# Inputs of the public and hidden checks ---------------------------------------------------


def _ragged(g, n, low, high):
    """A block size in [low, high] that does not divide n (n > high >= low >= 2)."""
    while True:
        block = randint(g, low, high)
        if n % block:
            return block


def _calls(cases):
    return [Call(args=tuple(case[:6]), kwargs={"causal": case[6], "keys_outside": case[7]}) for case in cases]


def _fixed_or_drawn(seed, public_seed, fixed, draw):
    """``fixed`` at ``public_seed``; at any other seed, ``draw(g)`` from that seed's generator, drawn
    again for as long as it repeats the public case."""
    cases = fixed
    g = gen(seed)
    while seed != public_seed and cases == fixed:
        cases = draw(g)
    return _calls(cases)


def _unmasked_draw(keys_outside):
    def draw(g):
        n = randint(g, 200, 400)
        small = (n, randint(g, 150, 450), (16, 32)[randint(g, 0, 1)], _ragged(g, n, 20, 90),
                 randint(g, 16, 96), 4, False, keys_outside)
        big = 1024 * randint(g, 4, 16)
        large = (big, big, (64, 128)[randint(g, 0, 1)], (64, 128)[randint(g, 0, 1)], (64, 128)[randint(g, 0, 1)],
                 2, False, keys_outside)
        return [small, large]
    return draw


def _queries_outside_calls(seed):
    """The page's tiled check (300 tokens of 16 features in tiles of 64 x 48, float32) and the page's
    Theorem 2 setting (8,192 tokens of 128 features in tiles of 128, 16-bit); drawn at grading."""
    return _fixed_or_drawn(seed, 0, [(300, 300, 16, 64, 48, 4, False, False),
                                     (8192, 8192, 128, 128, 128, 2, False, False)], _unmasked_draw(False))


def _keys_outside_calls(seed):
    """The same two cases in FlashAttention's first loop order; drawn at grading."""
    return _fixed_or_drawn(seed, 1, [(300, 300, 16, 64, 48, 4, False, True),
                                     (8192, 8192, 128, 128, 128, 2, False, True)], _unmasked_draw(True))


def _causal_calls(seed):
    """Causal self-attention over 1,024 tokens in tiles of 128 (the page's tile map), and 100 queries
    that come last among 700 keys in tiles of 64 x 48, 16-bit, in both loop orders."""
    def draw(g):
        t = randint(g, 6, 12)
        n_k = randint(g, 500, 900)
        n_q = randint(g, 60, 200)
        cases = []
        for keys_outside in (False, True):
            cases.append((128 * t, 128 * t, 64, 128, 128, 2, True, keys_outside))
            cases.append((n_q, n_k, 32, 64, 48, 2, True, keys_outside))
        return cases
    fixed = [(1024, 1024, 64, 128, 128, 2, True, False), (100, 700, 32, 64, 48, 2, True, False),
             (1024, 1024, 64, 128, 128, 2, True, True), (100, 700, 32, 64, 48, 2, True, True)]
    return _fixed_or_drawn(seed, 2, fixed, draw)


def _edge_calls(seed):
    """One query decoding over 1,000 keys (causal), blocks of one row, and blocks wider than every
    token, in both loop orders."""
    def draw(g):
        n_k = randint(g, 500, 1500)
        n = randint(g, 5, 12)
        cases = []
        for keys_outside in (False, True):
            cases.append((1, n_k, 64, 128, 64 * randint(g, 1, 4), 2, True, keys_outside))
            cases.append((n, n + randint(g, 0, 4), 8, 1, 1, 4, randint(g, 0, 1) == 1, keys_outside))
            cases.append((n, n, 8, n + randint(g, 1, 9), n + randint(g, 1, 9), 1, True, keys_outside))
        return cases
    fixed = []
    for keys_outside in (False, True):
        fixed += [(1, 1000, 64, 128, 128, 2, True, keys_outside), (7, 9, 8, 1, 1, 4, True, keys_outside),
                  (7, 7, 8, 16, 10, 1, True, keys_outside)]
    return _fixed_or_drawn(seed, 3, fixed, draw)


def _hidden_calls(seed):
    g = gen(seed)
    cases = []
    for keys_outside in (False, True):
        for causal in (False, True):
            for _ in range(2):
                n_q = randint(g, 40, 300)
                n_k = n_q + randint(g, 0, 400) if causal else randint(g, 40, 500)
                block_q = _ragged(g, n_q, 3, 37)
                block_k = _ragged(g, n_k, 3, 37)
                while block_k == block_q:
                    block_k = _ragged(g, n_k, 3, 37)
                cases.append((n_q, n_k, randint(g, 1, 128), block_q, block_k, (1, 2, 8)[randint(g, 0, 2)],
                              causal, keys_outside))
    return _calls(cases)


_HINT = ("this check compares both counts exactly; the reason above names the first call and key that "
         "differ. Walk the two loops of the contract's order block by block: which tiles are computed, "
         "how many rows each block really holds, and what each step reads or writes.")


# Kept mistakes, each with its hint --------------------------------------------------------


def _traffic_variant(full_blocks=False, queries_first=False, skipped_read=False, stats_bytes=None,
                     state_at_start=False, first_query_decides=False, kv_per_tile=False):
    """The reference with one thing changed (each kept mistake sets exactly one argument)."""
    def traffic(num_queries, num_keys, head_dim, block_q, block_k, bytes_per_value, causal=False,
                keys_outside=False):
        offset = 0 if queries_first else num_keys - num_queries
        stat = bytes_per_value if stats_bytes == "value" else STATS_BYTES
        row = head_dim * bytes_per_value
        state = row + 2 * stat

        def size(span, block):
            return block if full_blocks else span[1] - span[0]

        def computed(q_span, k_span):
            last = q_span[0] if first_query_decides else q_span[1] - 1
            return not causal or k_span[0] <= offset + last

        q_spans, k_spans = _spans(num_queries, block_q), _spans(num_keys, block_k)
        reads = writes = 0
        if not keys_outside:
            for q_span in q_spans:
                rows = size(q_span, block_q)
                reads += rows * row
                for k_span in k_spans:
                    if computed(q_span, k_span) or skipped_read:
                        reads += 2 * size(k_span, block_k) * row
                writes += rows * (row + stat)
        else:
            started = set()
            for k_span in k_spans:
                if not kv_per_tile:
                    reads += 2 * size(k_span, block_k) * row
                for q_span in q_spans:
                    rows = size(q_span, block_q)
                    if not computed(q_span, k_span):
                        reads += rows * row if skipped_read else 0
                        continue
                    if kv_per_tile:
                        reads += 2 * size(k_span, block_k) * row
                    reads += rows * row + (rows * state if q_span in started or state_at_start else 0)
                    writes += rows * state
                    started.add(q_span)
        return {"reads": reads, "writes": writes}
    return traffic


mistakes.add("every block full",
             "the last block of queries or of keys was counted with block_q or block_k rows; when the block "
             "size does not divide the tokens, the last block is shorter and moves only the rows it holds.",
             _traffic_variant(full_blocks=True))
mistakes.add("queries placed first",
             "with causal=True the tiles were chosen as if query i sat at position i; the queries come last, "
             "at positions num_keys - num_queries + i, so with fewer queries than keys they see more tiles.",
             _traffic_variant(queries_first=True))
mistakes.add("skipped tiles still read",
             "with causal=True the tiles above the diagonal are not computed, but their inputs (keys and "
             "values, or queries) were still counted as read; a skipped tile moves nothing.",
             _traffic_variant(skipped_read=True))
mistakes.add("statistics in the value dtype",
             "the log-sum-exp, m and l were counted with bytes_per_value bytes each; the contract keeps "
             "the statistics in float32 whatever the dtype of the values.",
             _traffic_variant(stats_bytes="value"))
mistakes.add("state read at the first tile",
             "with keys_outside=True every computed tile reads the state of its query block, the first one "
             "too; a query block's first computed tile starts from m = -inf, l = 0 and a zero output, and "
             "has nothing in main memory to read yet.",
             _traffic_variant(state_at_start=True))
mistakes.add("a tile judged by its first query",
             "with causal=True a tile was computed only when its first query sees its first key; a tile "
             "that straddles the diagonal is computed when any of its queries sees any of its keys, and the "
             "block's last query sees the most.",
             _traffic_variant(first_query_decides=True))
mistakes.add("keys and values read per tile in both orders",
             "with keys_outside=True the keys and values were counted once per computed tile, as in the "
             "other order; here the key block is the outer loop's, read once and kept on chip while the "
             "query blocks go by.",
             _traffic_variant(kv_per_tile=True))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("closed form per query block",
                   "how many keys each query block sees, the computed key blocks by ceiling division, "
                   "then sums of products")
def _traffic_alt_closed_form(num_queries, num_keys, head_dim, block_q, block_k, bytes_per_value,
                             causal=False, keys_outside=False):
    per_number = bytes_per_value
    totals = {"reads": 0, "writes": 0}
    for q0 in range(0, num_queries, block_q):
        rows = min(block_q, num_queries - q0)
        seen = min(num_keys, num_keys - num_queries + q0 + rows) if causal else num_keys
        tiles = -(-seen // block_k)                                   # key blocks computed
        keys_read = min(tiles * block_k, num_keys)                    # their rows
        if keys_outside:
            totals["reads"] += tiles * rows * head_dim * per_number
            totals["reads"] += (tiles - 1) * rows * (head_dim * per_number + 8)
            totals["writes"] += tiles * rows * (head_dim * per_number + 8)
        else:
            totals["reads"] += (rows + 2 * keys_read) * head_dim * per_number
            totals["writes"] += rows * (head_dim * per_number + 4)
    if keys_outside:
        totals["reads"] += 2 * num_keys * head_dim * per_number
    return totals


class _Memory:
    """Main memory seen from the chip: counts the bytes of every load and store of named rows."""

    def __init__(self):
        self.reads = self.writes = 0

    def load(self, rows, numbers_per_row, bytes_per_number):
        self.reads += rows * numbers_per_row * bytes_per_number

    def store(self, rows, numbers_per_row, bytes_per_number):
        self.writes += rows * numbers_per_row * bytes_per_number


@alternatives.keep("an instrumented loop",
                   "both loop orders run literally, with a memory object that counts every load and store; "
                   "the chip remembers which query blocks have a stored state")
def _traffic_alt_simulation(num_queries, num_keys, head_dim, block_q, block_k, bytes_per_value,
                            causal=False, keys_outside=False):
    memory = _Memory()
    q_starts, k_starts = list(range(0, num_queries, block_q)), list(range(0, num_keys, block_k))

    def visible(q0, k0):
        last_query = min(q0 + block_q, num_queries) - 1
        return (not causal) or k0 <= num_keys - num_queries + last_query

    def tile(q0, k0):
        return min(block_q, num_queries - q0), min(block_k, num_keys - k0)

    if keys_outside:
        stored = {}
        for k0 in k_starts:
            _, cols = tile(0, k0)
            memory.load(cols, head_dim, bytes_per_value)            # K block
            memory.load(cols, head_dim, bytes_per_value)            # V block
            for q0 in q_starts:
                if not visible(q0, k0):
                    continue
                rows, _ = tile(q0, k0)
                memory.load(rows, head_dim, bytes_per_value)        # Q block
                if stored.get(q0):
                    memory.load(rows, head_dim, bytes_per_value)    # O block
                    memory.load(rows, 2, 4)                         # m and l
                memory.store(rows, head_dim, bytes_per_value)
                memory.store(rows, 2, 4)
                stored[q0] = True
    else:
        for q0 in q_starts:
            rows, _ = tile(q0, 0)
            memory.load(rows, head_dim, bytes_per_value)
            for k0 in k_starts:
                if visible(q0, k0):
                    _, cols = tile(q0, k0)
                    memory.load(2 * cols, head_dim, bytes_per_value)
            memory.store(rows, head_dim, bytes_per_value)
            memory.store(rows, 1, 4)                                # the log-sum-exp
    return {"reads": memory.reads, "writes": memory.writes}


@alternatives.keep("a tile map in tensors",
                   "block sizes and the visible-tile map as int64 tensors; counts from sums over the map")
def _traffic_alt_tensors(num_queries, num_keys, head_dim, block_q, block_k, bytes_per_value,
                         causal=False, keys_outside=False):
    q_start = torch.arange(0, num_queries, block_q)
    k_start = torch.arange(0, num_keys, block_k)
    q_rows = (q_start + block_q).clamp(max=num_queries) - q_start
    k_rows = (k_start + block_k).clamp(max=num_keys) - k_start
    last_position = num_keys - num_queries + q_start + q_rows - 1
    tiles = k_start[None, :] <= last_position[:, None]
    if not causal:
        tiles = torch.ones_like(tiles)
    tiles = tiles.long()
    row = head_dim * bytes_per_value
    per_query_block = tiles.sum(dim=1)                          # tiles computed for each query block
    if keys_outside:
        reads = 2 * k_rows.sum() * row + (per_query_block * q_rows).sum() * row \
            + ((per_query_block - 1) * q_rows).sum() * (row + 8)
        writes = (per_query_block * q_rows).sum() * (row + 8)
    else:
        reads = q_rows.sum() * row + 2 * (tiles * k_rows[None, :]).sum() * row
        writes = q_rows.sum() * (row + 4)
    return {"reads": int(reads), "writes": int(writes)}


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch09_ex8", title="Main-memory traffic of tiled attention, counted exactly",
    name="tiled_attention_traffic", reference=tiled_attention_traffic, points=2,
    checks=[
        Check("the page's order (query blocks outside), no mask: 300 tokens of 16 in tiles of 64 x 48, "
              "4 bytes; 8,192 tokens of 128 in tiles of 128, 2 bytes", _queries_outside_calls, seed=0,
              hint=_HINT, rtol=0.0, atol=0.0),
        Check("FlashAttention's first order (key blocks outside), the same two cases", _keys_outside_calls,
              seed=1, hint=_HINT, rtol=0.0, atol=0.0),
        Check("causal, both orders: 1,024 tokens in tiles of 128; 100 queries that come last among 700 keys "
              "in tiles of 64 x 48", _causal_calls, seed=2, hint=_HINT, rtol=0.0, atol=0.0),
        Check("both orders: one query over 1,000 keys (causal), blocks of one row, blocks wider than every "
              "token", _edge_calls, seed=3, hint=_HINT, rtol=0.0, atol=0.0),
        Check("both counts are Python ints (the page's order, no mask)", _queries_outside_calls, seed=0,
              hint="this check compares the two counts first, then reads their types: the contract asks for "
                   "Python ints, numbers of bytes.", compare=_compare_types, weight=0.25),
        Check("random sizes, ragged blocks, both orders, with and without the mask (hidden)", _hidden_calls,
              seed=4, public=False, hint=_HINT, rtol=0.0, atol=0.0),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
