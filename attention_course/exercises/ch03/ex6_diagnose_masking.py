r"""ch03_ex6: Diagnosing a masked softmax from its weights and gradients.

The chapter shows several ways a masked softmax goes wrong, some of them only on a row whose
valid length is 0, some only in the backward pass, and one implementation can go wrong in
several ways at once. Here you see no code, only what one implementation produced on one
batch. Write `diagnose_masking(weights, grads, valid_lens)`, which finds every way in which
it is wrong.

- `valid_lens`: an integer tensor of shape `(batch,)` (one length per sequence) or
  `(batch, num_queries)` (one length per query), with values from 0 to `num_keys`: the lengths
  the implementation was called with. At least one row has valid length 0.
- `weights`: a float tensor (`float32` or `float64`) of shape `(batch, num_queries, num_keys)`:
  what the implementation returned for some scores and these `valid_lens`.
- `grads`: a tensor of the same shape and dtype: the gradient, with respect to the scores, of
  the loss `(weights * probe).sum()`, where `probe` is a fixed tensor of random numbers.
- A row is one pair `(b, i)`; its valid length `n` is `valid_lens[b]` or `valid_lens[b, i]`.
  Return a dict with exactly these five keys, each mapped to a Python `bool` that says whether
  the failure shows in these numbers, each judged on its own:
  - `"nan_weights"`: some weight is NaN;
  - `"weights_on_empty_row"`: a row with `n = 0` is not all exactly 0 (the chapter's
    convention; a NaN is not 0);
  - `"weight_on_masked_keys"`: a row with `n >= 1` has a weight that is not exactly 0 at a key
    position `j >= n`;
  - `"rows_not_normalised"`: the weights of a row with `n >= 1` sum to a number further than
    `1e-4` from 1;
  - `"nan_gradient"`: some entry of `grads` is NaN.

  All five `False` means that the implementation is correct. The diagnosis judges the numbers,
  not the method: an implementation whose weights and gradients are right is correct whatever
  it does inside.
"""
from __future__ import annotations

import torch

from ... import functional as F_att
from ...checks.checking import compare_all
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import Kept, gen, randint

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)

FAILURES = ("nan_weights", "weights_on_empty_row", "weight_on_masked_keys", "rows_not_normalised",
            "nan_gradient")


# The reference ----------------------------------------------------------------------------


def diagnose_masking(weights, grads, valid_lens):
    """The contract's five tests, vectorised over the rows, each on its own."""
    batch, num_queries, num_keys = weights.shape
    lens = valid_lens.reshape(batch, -1).expand(batch, num_queries)     # one length per row
    masked = torch.arange(num_keys) >= lens[..., None]                   # (batch, q, k)
    empty = lens == 0
    return {
        "nan_weights": bool(torch.isnan(weights).any()),
        "weights_on_empty_row": bool((weights[empty] != 0).any()),      # NaN != 0 too
        "weight_on_masked_keys": bool((weights[masked & ~empty[..., None]] != 0).any()),
        "rows_not_normalised": bool(((weights.sum(dim=-1)[~empty] - 1).abs() > 1e-4).any()),
        "nan_gradient": bool(torch.isnan(grads).any()),
    }


# Inputs of the public and hidden checks ---------------------------------------------------

# The implementations whose outputs the checks pass, each with the failures the contract finds in it.


def _keep(scores, valid_lens):
    return F_att.valid_mask(valid_lens, scores.shape[1], scores.shape[2])


def _minus_inf(scores, valid_lens):
    return torch.softmax(scores.masked_fill(~_keep(scores, valid_lens), float("-inf")), dim=-1)


def _finite_fill(value, zero_empty_rows):
    def impl(scores, valid_lens):
        keep = _keep(scores, valid_lens)
        weights = torch.softmax(scores.masked_fill(~keep, value), dim=-1)
        if zero_empty_rows:
            weights = weights.masked_fill(~keep.any(dim=-1, keepdim=True), 0.0)
        return weights
    return impl


def _mask_after(scores, valid_lens):
    return torch.softmax(scores, dim=-1).masked_fill(~_keep(scores, valid_lens), 0.0)


def _additive(scores, valid_lens):
    keep = _keep(scores, valid_lens)
    minus_inf_or_zero = torch.zeros(keep.shape, dtype=scores.dtype).masked_fill(~keep, float("-inf"))
    return torch.softmax(scores + minus_inf_or_zero, dim=-1).masked_fill(~keep, 0.0)


def _minus_inf_empty_rows_apart(scores, valid_lens):
    # Correct as the chapter's masked softmax is (not that function itself: a release withholds it,
    # and these calls are drawn wherever the checks run): -inf fill, empty rows given a finite row
    # first, then every masked weight set to exactly 0.
    keep = _keep(scores, valid_lens)
    has_key = keep.any(dim=-1, keepdim=True)
    filled = scores.masked_fill(~keep, float("-inf")).masked_fill(~has_key, 0.0)
    return torch.softmax(filled, dim=-1).masked_fill(~keep, 0.0)


def _leak_subtracted(scores, valid_lens):
    # A -30 fill whose leak is "removed" by subtracting each row's leaked total from every key: a
    # masked key keeps its own leak minus the whole row's, a negative weight of about -1e-14 (the short
    # row has at least two masked keys). A leak is any weight that is not 0, negative ones too.
    keep = _keep(scores, valid_lens)
    weights = _finite_fill(-30.0, True)(scores, valid_lens)
    return weights - weights.masked_fill(keep, 0.0).sum(dim=-1, keepdim=True)


def _empty_rows_shrunk(scores, valid_lens):
    # A -1e9 fill whose empty rows are scaled by 1e-9 rather than zeroed: weights of about 1e-10 there,
    # below any tolerance, still not the exact zeros the contract asks of an empty row.
    weights = _finite_fill(-1e9, False)(scores, valid_lens)
    has_key = _keep(scores, valid_lens).any(dim=-1, keepdim=True)
    return torch.where(has_key, weights, weights * 1e-9)


def _scaled(impl, factor):
    def scaled(scores, valid_lens):
        return impl(scores, valid_lens) * factor
    return scaled


# Each with the failures the contract finds in it (the -inf fill and the last three show two or more
# at once, so that an answer reporting only one failure is caught).
IMPLEMENTATIONS = (
    ("a -inf fill, empty rows set apart", _minus_inf_empty_rows_apart, ()),
    ("a -1e9 fill, empty rows zeroed", _finite_fill(-1e9, True), ()),
    ("a -inf fill", _minus_inf, ("nan_weights", "weights_on_empty_row")),
    ("a -1e6 fill (d2l)", _finite_fill(-1e6, False), ("weights_on_empty_row",)),
    ("a -1e9 fill, empty rows scaled by 1e-9", _empty_rows_shrunk, ("weights_on_empty_row",)),
    ("a -30 fill, empty rows zeroed", _finite_fill(-30.0, True), ("weight_on_masked_keys",)),
    ("a -30 fill, empty rows zeroed, the leaked total subtracted from every key", _leak_subtracted,
     ("weight_on_masked_keys",)),
    ("zeros written after a plain softmax", _mask_after, ("rows_not_normalised",)),
    ("an additive -inf mask, zeros written after", _additive, ("nan_gradient",)),
    ("a -30 fill, empty rows kept", _finite_fill(-30.0, False), ("weights_on_empty_row", "weight_on_masked_keys")),
    ("a -30 fill, empty rows zeroed, weights times 0.9", _scaled(_finite_fill(-30.0, True), 0.9),
     ("weight_on_masked_keys", "rows_not_normalised")),
    ("an additive -inf mask, zeros written after, weights times 0.9", _scaled(_additive, 0.9),
     ("rows_not_normalised", "nan_gradient")),
)


def _observe(impl, scores, valid_lens, probe):
    """One call: the weights and the gradient of (weights * probe).sum() with respect to the scores."""
    leaf = scores.clone().requires_grad_(True)
    weights = impl(leaf, valid_lens)
    (weights * probe).sum().backward()
    return Call(args=(weights.detach(), leaf.grad, valid_lens))


def _lengths(g, batch, num_queries, num_keys, per_query):
    """Lengths with an empty row and a short one (1 <= n <= num_keys - 2) always among them."""
    if per_query:
        lens = torch.randint(0, num_keys + 1, (batch, num_queries), generator=g)
        lens[0, randint(g, 0, num_queries - 1)] = 0
        lens[-1, randint(g, 0, num_queries - 1)] = randint(g, 1, num_keys - 2)
    else:
        lens = torch.randint(0, num_keys + 1, (batch,), generator=g)
        lens[randint(g, 0, batch - 1)] = 0
        while bool((lens == 0).all()):
            lens[randint(g, 0, batch - 1)] = randint(g, 1, num_keys - 2)
        short = int(torch.nonzero(lens != 0)[0, 0])
        lens[short] = randint(g, 1, num_keys - 2)
    return lens


def _batch_calls(per_query, dtype=torch.float32):
    def make(seed):
        g = gen(seed)
        batch, num_queries, num_keys = randint(g, 2, 4), randint(g, 2, 4), randint(g, 3, 7)
        # Scores within [-2, 2]: every padded key takes a visible share of a plain softmax.
        scores = torch.randn(batch, num_queries, num_keys, generator=g, dtype=dtype).clamp(-2, 2)
        probe = torch.randn(batch, num_queries, num_keys, generator=g, dtype=dtype)
        lens = _lengths(g, batch, num_queries, num_keys, per_query)
        return [_observe(impl, scores, lens, probe) for _, impl, _ in IMPLEMENTATIONS]
    return make


def _hidden_calls(seed):
    g = gen(seed)
    calls = []
    for _, impl, _ in IMPLEMENTATIONS:
        dtype = (torch.float32, torch.float64)[randint(g, 0, 1)]
        batch, num_queries, num_keys = randint(g, 2, 5), randint(g, 1, 5), randint(g, 3, 9)
        scores = torch.randn(batch, num_queries, num_keys, generator=g, dtype=dtype).clamp(-2, 2)
        probe = torch.randn(batch, num_queries, num_keys, generator=g, dtype=dtype)
        lens = _lengths(g, batch, num_queries, num_keys, per_query=bool(randint(g, 0, 1)))
        calls.append(_observe(impl, scores, lens, probe))
    return calls


# Kept mistakes, each with its hint --------------------------------------------------------


def _rows(weights, valid_lens):
    """(lengths per row (batch, q), masked key positions (batch, q, k), empty rows (batch, q))."""
    batch, num_queries, num_keys = weights.shape
    lens = valid_lens.reshape(batch, -1).expand(batch, num_queries)
    return lens, torch.arange(num_keys) >= lens[..., None], lens == 0


def _nonzero(w):
    return w != 0


def _findings(weights, grads, valid_lens, *, is_nan=torch.isnan, empty_wrong=_nonzero, leak=_nonzero,
              empty_rows_are_leaks=False, all_rows_sum=False, gradients=True, first_only=False):
    """The contract's five tests with one of them changed per kept mistake (each keyword is one way a
    real answer gets a test wrong; the defaults are the contract's)."""
    _, masked, empty = _rows(weights, valid_lens)
    leak_at = masked if empty_rows_are_leaks else masked & ~empty[..., None]
    sums = weights.sum(dim=-1) if all_rows_sum else weights.sum(dim=-1)[~empty]
    found = {
        "nan_weights": bool(is_nan(weights).any()),
        "weights_on_empty_row": bool(empty_wrong(weights[empty]).any()),
        "weight_on_masked_keys": bool(leak(weights[leak_at]).any()),
        "rows_not_normalised": bool(((sums - 1).abs() > 1e-4).any()),
        "nan_gradient": gradients and bool(is_nan(grads).any()),
    }
    if first_only:  # an if/elif chain: the first failure found, the others left False
        first = next((name for name in FAILURES if found[name]), None)
        found = {name: name == first for name in FAILURES}
    return found


@mistakes.keep("only the first failure reported",
               "your answer reports at most one failure per implementation, but one implementation can fail "
               "in several ways at once (NaN weights on an empty row are weights on that row too, a leak can come "
               "with rows that do not sum to 1): each entry of the dict is judged on its own.")
def _dm_first_only(weights, grads, valid_lens):
    return _findings(weights, grads, valid_lens, first_only=True)


@mistakes.keep("NaN looked for in the weights only",
               "an implementation whose weights are right can still break training: an additive -inf mask "
               "gives the right weights and a NaN gradient on an empty row. The gradients are part of the "
               "diagnosis.")
def _dm_weights_only(weights, grads, valid_lens):
    return _findings(weights, grads, valid_lens, gradients=False)


@mistakes.keep("NaN on an empty row not counted there",
               "a row of valid length 0 that holds NaN is not all zeros, so weights_on_empty_row holds as well "
               "as nan_weights; a test such as abs() > 0 or > 0 is False for NaN and misses it.")
def _dm_empty_nan_missed(weights, grads, valid_lens):
    return _findings(weights, grads, valid_lens, empty_wrong=lambda w: w.abs() > 0)


@mistakes.keep("empty rows compared with a tolerance",
               "a row of valid length 0 must be exactly 0: an implementation that scales such a row down "
               "instead of zeroing it leaves weights far below a tolerance like 1e-6, and the contract counts them.")
def _dm_empty_tolerance(weights, grads, valid_lens):
    return _findings(weights, grads, valid_lens, empty_wrong=lambda w: (w.abs() > 1e-6) | w.isnan())


@mistakes.keep("masked weights compared with a tolerance",
               "a masked key must get weight exactly 0: a finite fill such as -30 leaks weights far below a "
               "tolerance like 1e-6, and the contract counts such a leak however small.")
def _dm_tolerance(weights, grads, valid_lens):
    return _findings(weights, grads, valid_lens, empty_wrong=lambda w: (w.abs() > 1e-6) | w.isnan(),
                     leak=lambda w: w.abs() > 1e-6)


@mistakes.keep("empty rows counted as leaks",
               "weight_on_masked_keys is about rows with at least one valid key: a row of valid length 0 has "
               "every key masked, and weights there are judged by weights_on_empty_row alone.")
def _dm_empty_rows_leak(weights, grads, valid_lens):
    return _findings(weights, grads, valid_lens, empty_rows_are_leaks=True)


@mistakes.keep("NaN compared with ==",
               "NaN is not equal to anything, itself included, so a comparison with float('nan') is always "
               "False and never finds one; torch has a test made for NaN.")
def _dm_nan_equality(weights, grads, valid_lens):
    return _findings(weights, grads, valid_lens, is_nan=lambda t: t == float("nan"))


@mistakes.keep("every row required to sum to 1",
               "by the chapter's convention a row of valid length 0 sums to 0, not 1; only rows with at least "
               "one valid key must sum to 1.")
def _dm_all_rows_sum(weights, grads, valid_lens):
    return _findings(weights, grads, valid_lens, all_rows_sum=True)


@mistakes.keep("a leak looked for as a positive weight only",
               "a masked key's weight must be exactly 0: a leak can be negative too (one implementation here "
               "subtracts each row's leaked total from every key), and any weight that is not 0 counts.")
def _dm_positive_leak_only(weights, grads, valid_lens):
    return _findings(weights, grads, valid_lens, leak=lambda w: w > 0)


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("Python loops over rows", "one row at a time in Python floats, a set of findings")
def _dm_alt_loops(weights, grads, valid_lens):
    batch, num_queries, num_keys = weights.shape
    found = set()
    for b in range(batch):
        for i in range(num_queries):
            n = int(valid_lens[b] if valid_lens.dim() == 1 else valid_lens[b, i])
            row = weights[b, i].tolist()
            if any(w != w for w in row):
                found.add("nan_weights")
            if n == 0:
                if any(w != 0.0 for w in row):
                    found.add("weights_on_empty_row")
            else:
                if any(w != 0.0 for w in row[n:]):
                    found.add("weight_on_masked_keys")
                if abs(sum(row) - 1.0) > 1e-4:
                    found.add("rows_not_normalised")
            if any(x != x for x in grads[b, i].tolist()):
                found.add("nan_gradient")
    return {name: name in found for name in ("nan_weights", "weights_on_empty_row", "weight_on_masked_keys",
                                             "rows_not_normalised", "nan_gradient")}


@alternatives.keep("flattened rows in float64", "rows flattened with repeat_interleave'd lengths, float64, "
                   "a table of tests")
def _dm_alt_flat(weights, grads, valid_lens):
    num_queries, num_keys = weights.shape[1], weights.shape[2]
    w = weights.double().reshape(-1, num_keys)
    lens = (torch.repeat_interleave(valid_lens, num_queries) if valid_lens.dim() == 1
            else valid_lens.reshape(-1))
    pad = torch.arange(num_keys)[None, :] >= lens[:, None]
    full = lens > 0
    tests = {
        "nan_weights": w.isnan().any(),
        "weights_on_empty_row": w[~full].ne(0).any(),
        "weight_on_masked_keys": torch.where(pad & full[:, None], w, 0.0).ne(0).any(),
        "rows_not_normalised": (w[full].sum(1) - 1).abs().gt(1e-4).any(),
        "nan_gradient": grads.isnan().any(),
    }
    return {name: bool(value) for name, value in tests.items()}


@alternatives.keep("counts and sums of the masked weights", "masks turned into counts; nan_to_num to keep "
                   "NaN out of the sums")
def _dm_alt_counts(weights, grads, valid_lens):
    batch, num_queries, num_keys = weights.shape
    lens = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens
    lens = lens.expand(batch, num_queries)
    valid = (torch.arange(num_keys) < lens.unsqueeze(-1)).to(weights.dtype)
    nonzero = (weights != 0).to(weights.dtype)                  # NaN counts as not zero
    empty = (lens == 0).to(weights.dtype)
    on_empty = float((nonzero.sum(-1) * empty).sum())
    on_padding = float((nonzero * (1 - valid)).sum(-1).mul(1 - empty).sum())
    off_by = ((weights.nan_to_num(0.0).sum(-1) - 1).abs() * (1 - empty)).max()
    return dict(nan_weights=int(weights.isnan().sum()) > 0, weights_on_empty_row=on_empty > 0,
                weight_on_masked_keys=on_padding > 0, rows_not_normalised=float(off_by) > 1e-4,
                nan_gradient=int(grads.isnan().sum()) > 0)


# Registration -----------------------------------------------------------------------------


def _unwrapped(value):
    """A returned dict as plain data (``checks.calls`` carries it as ``{"__dict__": {...}}``)."""
    return value["__dict__"] if isinstance(value, dict) and set(value) == {"__dict__"} else value


def _compare_findings(got, want, calls):
    """The default comparison, except that a dict of findings is judged entry by entry, each named."""
    for i, (g, w) in enumerate(zip(got, want)):
        if g.get("status") != "ok" or w.get("status") != "ok":
            continue
        where = f"call {i + 1} of {len(calls)}"
        mine, truth = _unwrapped(g["value"]), _unwrapped(w["value"])
        if not isinstance(mine, dict):
            return f"{where}: returned a {type(mine).__name__}, expected a dict of five bools"
        if set(mine) != set(truth):
            missing, extra = sorted(set(truth) - set(mine)), sorted(set(mine) - set(truth))
            return f"{where}: the dict's keys differ (missing {missing}, unexpected {extra})"
        for name in FAILURES:
            if not isinstance(mine[name], bool):
                return f"{where}: {name!r} is a {type(mine[name]).__name__}, expected a Python bool"
            if mine[name] != truth[name]:
                return f"{where}: {name!r} should be {truth[name]}, got {mine[name]}"
    return compare_all(got, want, Check("", lambda seed: [], ""), calls)


_HINT = ("this check passes what {} implementations of the masked softmax returned on one batch ({}), one call "
         "each, and compares your five findings; the reason above says which call and which entry differ.")

register(Exercise(
    label="ch03_ex6", title="Diagnosing a masked softmax from its weights and gradients",
    name="diagnose_masking", reference=diagnose_masking, points=2,
    checks=[
        Check("twelve implementations, 1-D valid_lens (one length per sequence), float32", _batch_calls(False),
              seed=0, compare=_compare_findings, hint=_HINT.format(len(IMPLEMENTATIONS), "1-D valid_lens, float32")),
        Check("twelve implementations, 2-D valid_lens (one length per query), float32", _batch_calls(True),
              seed=1, compare=_compare_findings, hint=_HINT.format(len(IMPLEMENTATIONS), "2-D valid_lens, float32")),
        Check("twelve implementations, 2-D valid_lens, float64", _batch_calls(True, torch.float64),
              seed=2, compare=_compare_findings, hint=_HINT.format(len(IMPLEMENTATIONS), "2-D valid_lens, float64")),
        Check("random sizes, dtypes and forms of valid_lens (hidden)", _hidden_calls, public=False,
              compare=_compare_findings,
              hint=_HINT.format(len(IMPLEMENTATIONS), "a batch of its own for each, random sizes and dtype")),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
