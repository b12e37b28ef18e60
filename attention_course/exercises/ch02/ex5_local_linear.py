r"""ch02_ex5: Local linear regression: fixing the boundary bias.

Nadaraya–Watson pooling fits a weighted *constant* around each query. Local linear
regression fits a weighted *line* and reads it at the query {footcite:p}`fan1992`: for a
query $q$, choose $a$ and $b$ that minimise
$\sum_i K_i\,\big(v_i - a - b\,(k_i - q)\big)^2$ with the Gaussian weights
$K_i = \exp\!\big(-(q - k_i)^2 / (2\,\text{width}^2)\big)$; the prediction is $a$.
The page does not solve this problem: derive its solution yourself. The prediction turns out to
be a weighted sum of the values, $a = \sum_j \ell_j v_j$, with weights $\ell_j$ that depend on
$q$, the keys and the width but not on the values; find those weights.

Write `local_linear(queries, keys, values, width)`.

* `queries`: float32, shape `(m,)`; `keys`, `values`: float32, shape `(n,)` with
  $n \ge 2$, in any order; `width`: a positive Python float.
* Return `(predictions, weights)`: `weights` float32 of shape `(m, n)`, row $i$ holding
  the $\ell_j$ of query $i$, so that `weights[i] @ v` is the minimiser's $a$ at query $i$ for
  every vector `v` of values one could pass; `predictions` float32 of shape `(m,)`, equal to
  `weights @ values`.
* Raise `ValueError` naming `width` when `width` is not positive, and naming `keys` and
  `values` unless both are 1-D with the same length $\ge 2$.
* The checks use widths of at least $0.3$ on keys spread over $[0, 5]$, where the
  minimisation has exactly one solution at every query; you need not handle a query at which
  all but one $K_i$ underflow to 0. Far from the keys every $K_i$ of a query can underflow in
  float32; multiplying all the $K_i$ of one query by one constant does not change its
  minimiser.
* Each row of `weights` is compared with the course's float64 answer to about $10^{-3}$ of
  that row's largest $|\ell_j|$ (each prediction to $10^{-3}$ of the sizes of the terms it
  sums), with more room at queries where float32 rounding is amplified (few or bunched keys
  nearby), so a correct fit computed in float32 passes.

Some of the weights are negative. When your function passes, compare it in a cell of your own
with Gaussian pooling at $x = 0$ and $x = 5$ on the chapter's data (width $0.225$).
"""
from __future__ import annotations

import torch

from ...data import make_regression_1d
from ...checks.registry import Alternative, Call, Check, Exercise, Mistake, register
from .._kit import ERROR_WEIGHT, Kept
from .ex3_fit_width import _check_1d_pair

mistakes = Kept(Mistake)
alternatives = Kept(Alternative)


# The reference ----------------------------------------------------------------------------


def _validate_local(queries, keys, values, width):
    if queries.dim() != 1:
        raise ValueError(f"queries must be 1-D, got shape {tuple(queries.shape)}")
    _check_1d_pair(keys, values)
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not width > 0:
        raise ValueError(f"width must be a positive number, got {width!r}")


def _local_weights64(queries, keys, width, centred=True, sign=1.0, nadaraya=False):
    q, k = queries.double()[:, None], keys.double()[None, :]
    kernel = torch.softmax(-(q - k) ** 2 / (2 * float(width) ** 2), dim=-1)  # rows sum to 1
    if nadaraya:
        return kernel
    u = (k - q) if centred else k.expand_as(kernel)
    s1 = (kernel * u).sum(-1, keepdim=True)
    s2 = (kernel * u ** 2).sum(-1, keepdim=True)
    return kernel * (s2 - sign * u * s1) / (s2 - s1 ** 2)


def local_linear(queries, keys, values, width):
    """Local linear regression with a Gaussian kernel; returns (predictions, weights).

    In float64 inside: the weights divide by a weighted variance of the keys, which
    float32 computes with a relative error near 1e-6 that grows as the width shrinks.
    """
    _validate_local(queries, keys, values, width)
    weights = _local_weights64(queries, keys, width)
    return (weights @ values.double()).to(values.dtype), weights.to(values.dtype)


# Inputs of the public and hidden checks ---------------------------------------------------


def _local_calls(seed):
    g = torch.Generator().manual_seed(seed)
    data = make_regression_1d(num_train=30, seed=seed)
    queries = 0.3 + 4.4 * torch.rand(12, generator=g)
    return [Call(args=(queries, data.x_train, data.y_train, 0.4))]


def _local_boundary_calls(seed):
    data = make_regression_1d(num_train=40, seed=seed)
    queries = torch.tensor([0.0, 0.1, 2.5, 4.9, 5.0])
    return [Call(args=(queries, data.x_train, data.y_train, 0.3))]


def _local_line_calls(seed):
    g = torch.Generator().manual_seed(seed)
    keys = 5 * torch.rand(25, generator=g)  # unsorted
    values = 1.5 - 0.8 * keys                 # a straight line, no noise
    queries = torch.linspace(0.0, 5.0, 9)
    return [Call(args=(queries, keys, values, 0.5))]


def _local_bad_calls(seed):
    data = make_regression_1d(num_train=10, seed=seed)
    x, y = data.x_train, data.y_train
    queries = torch.tensor([1.0, 2.0])
    return [Call(args=(queries, x, y, 0.0)), Call(args=(queries, x, y, -0.3)),
            Call(args=(queries, x, y[:8], 0.5)),
            Call(args=(queries, x[None], y[None], 0.5)),     # keys, values not 1-D
            Call(args=(queries, x[:1], y[:1], 0.5))]         # n = 1


def _local_mentions(call):
    keys, values = call.args[1:3]
    bad_pair = keys.dim() != 1 or keys.shape != values.shape or keys.numel() < 2
    return ["keys", "values"] if bad_pair else ["width"]


def _local_hidden_calls(seed):
    g = torch.Generator().manual_seed(seed)
    num_train = int(torch.randint(20, 50, (1,), generator=g))
    data = make_regression_1d(num_train=num_train, noise=0.25, seed=seed)
    width = round(0.3 + 0.6 * torch.rand(1, generator=g).item(), 3)
    queries = 5 * torch.rand(15, generator=g)
    return [Call(args=(queries, data.x_train, data.y_train, width)),
            Call(args=(data.x_test[::10], data.x_train, data.y_train, width))]


# float32 answers against a float64 reference, compared row by row (_compare_local).
_LOCAL_RTOL, _LOCAL_ATOL = 1e-3, 1e-5
_LOCAL_ROUNDING = 32 * torch.finfo(torch.float32).eps


def _local_conditioning(queries, keys, width):
    """Per query, (m^2 + s^2) / s^2 for the kernel-weighted mean m and variance s^2 of the keys:
    the condition number that float32 rounding meets when the line is fitted in k itself."""
    q, k = queries.double()[:, None], keys.double()[None, :]
    kernel = torch.softmax(-(q - k) ** 2 / (2 * float(width) ** 2), dim=-1)
    mean = (kernel * k).sum(-1)
    var = (kernel * (k - mean[:, None]) ** 2).sum(-1)
    return (mean ** 2 + var) / var


def _compare_local(got, want, calls):
    """(predictions, weights) within a tolerance set per query by each row's scale and conditioning.

    A float32 fit makes errors of about one absolute size along a row of weights, set by the
    row's largest weight, and that size grows with the conditioning of the 2 x 2 system. Fitted
    in k rather than in k - q (algebraically the same minimiser), a + b q cancels two large terms
    near q = 5; there the errors reach eps32 * kappa times the row's scale, kappa the
    conditioning of _local_conditioning (about 1500 at the ends of the public check, up to ~1e4
    at hidden queries past the last two keys), measured at under 10 eps32 * kappa. So row i of
    weights must agree within (_LOCAL_RTOL + 32 eps32 kappa_i) times its largest |weight|, and
    prediction i within that times sum_j |weight_ij value_j| (the size of the terms it sums),
    plus _LOCAL_ATOL. Each kept mistake is off by over 100 times this somewhere. Everything
    else (types, dtypes, shapes, NaN, errors) is compared as usual."""
    from ...checks.checking import compare_outcome
    structure = Check("structure", lambda seed: [], hint="", rtol=0.0, atol=float("inf"))
    for i, (mine, theirs, call) in enumerate(zip(got, want, calls)):
        where = "" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: "
        reason = compare_outcome(mine, theirs, structure, call)
        if reason:
            return where + reason
        if theirs["status"] != "ok":
            continue
        queries, keys, values, width = call.args
        (p_mine, w_mine), (p_want, w_want) = mine["value"]["__seq__"], theirs["value"]["__seq__"]
        w_ref = w_want.double()
        rel = _LOCAL_RTOL + _LOCAL_ROUNDING * _local_conditioning(queries, keys, width)
        allowed = (rel * (w_ref * values.double()).abs().sum(1) + _LOCAL_ATOL,
                   (rel * w_ref.abs().amax(1))[:, None] + _LOCAL_ATOL)
        for item, (g, w) in enumerate(((p_mine, p_want), (w_mine, w_want))):
            off = (g.double() - w.double()).abs()
            bound = allowed[item].expand_as(off)
            if bool((off > bound).any()):
                flat = int((off - bound).argmax())
                row = flat if item == 0 else flat // w.shape[1]
                name = ("predictions", "weights")[item]
                return (f"{where}item {item} of the result ({name}) has the right shape but wrong values (at "
                        f"query {row}: off by {off.flatten()[flat].item():.3g}, more than the "
                        f"{bound.flatten()[flat].item():.2g} that float32 rounding explains there)")
    return None


# Kept mistakes, each with its hint --------------------------------------------------------


def _local_mistake(validate=True, **kw):
    def impl(queries, keys, values, width):
        if validate:
            _validate_local(queries, keys, values, width)
        weights = _local_weights64(queries, keys, width, **kw)
        return (weights @ values.double()).float(), weights.float()
    return impl


mistakes.add("Nadaraya–Watson weights",
             "these are the plain Nadaraya–Watson weights: they fit a "
"constant, not a line, so a slope in the data biases the ends.",
             _local_mistake(nadaraya=True))


mistakes.add("line evaluated at x = 0",
             "your line was fitted in k rather than in k - q, and its "
"intercept is its value at x = 0; the prediction is the line's value at the query.",
             _local_mistake(centred=False))


mistakes.add("slope term with the wrong sign",
             "the slope's correction enters your weights with the wrong sign "
"(a sign lost when b was eliminated): the rows no longer sum to 1 and values on a straight line "
"are not reproduced.",
             _local_mistake(sign=-1.0))


@mistakes.keep("kernel factor K_i left out",
               "your weights lack the kernel factor K_i of their own key: the "
"weighted sums are right, but each key's weight must carry its K_i too, or keys far from the "
"query weigh as much as near ones and the rows no longer sum to 1.")
def _local_no_kernel(queries, keys, values, width):
    _validate_local(queries, keys, values, width)
    q, k = queries.double()[:, None], keys.double()[None, :]
    kernel = torch.exp(-(q - k) ** 2 / (2 * float(width) ** 2))
    u = k - q
    s0, s1, s2 = (kernel.sum(-1, keepdim=True), (kernel * u).sum(-1, keepdim=True),
                  (kernel * u ** 2).sum(-1, keepdim=True))
    weights = (s2 - u * s1) / (s0 * s2 - s1 ** 2)
    return (weights @ values.double()).float(), weights.float()


@mistakes.keep("the slope read instead of the intercept",
               "your weights give the slope b of the local line, not its value a at "
"the query: of the two unknowns the prediction is the one that multiplies 1, so the rows sum "
"to 1, not 0.")
def _local_slope_row(queries, keys, values, width):
    _validate_local(queries, keys, values, width)
    rows = []
    for q in queries.double():
        u = keys.double() - q
        kernel = torch.exp(-u ** 2 / (2 * float(width) ** 2))
        design = torch.stack([torch.ones_like(u), u], dim=1)
        rows.append(torch.linalg.solve(design.T @ (kernel[:, None] * design), design.T * kernel)[1])
    weights = torch.stack(rows)
    return (weights @ values.double()).float(), weights.float()


mistakes.add("no width check",
             "a width of 0 or below must raise ValueError naming width.",
             _local_mistake(validate=False))


# Kept alternatives (correct answers in other styles) --------------------------------------


@alternatives.keep("2 x 2 solve per query",
                   "torch.linalg.solve of the weighted normal equations, "
"a loop over queries, float32")
def _local_alt_solve_loops(queries, keys, values, width):
    # One weighted least-squares problem per query: beta = (X^T K X)^-1 X^T K v, X = [1, k - q].
    if queries.dim() != 1:
        raise ValueError("queries must be 1-D")
    if keys.dim() != 1 or keys.shape != values.shape or len(keys) < 2:
        raise ValueError("keys and values must be 1-D with the same length >= 2")
    if width <= 0:
        raise ValueError("width must be > 0")
    rows = []
    for q in queries:
        design = torch.stack([torch.ones_like(keys), keys - q], dim=1)       # (n, 2)
        kernel = torch.softmax(-(keys - q) ** 2 / (2 * width ** 2), dim=0)    # (n,)
        weighted = design.T * kernel                                          # X^T K, (2, n)
        hat = torch.linalg.solve(weighted @ design, weighted)                 # (2, n)
        rows.append(hat[0])  # the intercept of the line centred at q is the prediction
    weights = torch.stack(rows)
    return weights @ values, weights


@alternatives.keep("corrected Nadaraya–Watson",
                   "NW weights times 1 + (q - mean key)(k - mean key) / "
"spread")
def _local_alt_corrected_nw(queries, keys, values, width):
    # Nadaraya–Watson weights, plus a slope correction through the weighted mean of the keys.
    if queries.ndim != 1:
        raise ValueError(f"queries: expected 1-D, got {queries.shape}")
    if keys.ndim != 1 or values.ndim != 1 or keys.numel() != values.numel() or keys.numel() < 2:
        raise ValueError(f"keys {keys.shape} and values {values.shape}: 1-D, same length >= 2")
    if not width > 0:
        raise ValueError(f"width {width} is not positive")
    alpha = torch.softmax(-0.5 * ((queries[:, None] - keys[None, :]) / width) ** 2, dim=1).double()
    k = keys.double()
    mean_key = alpha @ k                                            # (m,)
    centred = k[None, :] - mean_key[:, None]                        # (m, n)
    spread = (alpha * centred ** 2).sum(1, keepdim=True)
    weights = alpha * (1 + (queries.double() - mean_key)[:, None] * centred / spread)
    return (weights @ values.double()).float(), weights.float()


@alternatives.keep("pseudo-inverse",
                   "torch.linalg.pinv of the sqrt-kernel-weighted design")
def _local_alt_pinv(queries, keys, values, width):
    # sqrt(K)-weighted design and its pseudo-inverse: the first row maps sqrt(K) v to the intercept.
    if queries.dim() != 1:
        raise ValueError("queries should be 1-D")
    if keys.dim() != 1 or values.dim() != 1 or keys.shape[0] != values.shape[0] or keys.shape[0] < 2:
        raise ValueError("keys and values should be 1-D of the same length (at least 2)")
    if width <= 0:
        raise ValueError(f"width={width}: must be positive")
    k = keys.double()
    out = []
    for q in queries.double():
        root = torch.exp(-(k - q) ** 2 / (4 * width ** 2))                   # sqrt of the kernel
        design = torch.stack([torch.ones_like(k), k - q], 1) * root[:, None]
        out.append(torch.linalg.pinv(design)[0] * root)
    weights = torch.stack(out)
    return (weights @ values.double()).float(), weights.float()


@alternatives.keep("raw moments in float64",
                   "unnormalised kernel, S0 S2 - S1^2 as a determinant")
def _local_alt_moments_batched(queries, keys, values, width):
    # Raw kernel moments S0, S1, S2 as a batch of 2 x 2 systems, in float64.
    if queries.dim() != 1:
        raise ValueError("queries needs shape (m,)")
    if keys.dim() != 1 or keys.shape != values.shape or keys.numel() < 2:
        raise ValueError("keys and values need the same shape (n,), n >= 2")
    if width <= 0:
        raise ValueError("width must be positive")
    u = keys.double()[None, :] - queries.double()[:, None]
    kernel = torch.exp(-u ** 2 / (2 * width ** 2))
    s0, s1, s2 = (kernel.sum(1), (kernel * u).sum(1), (kernel * u * u).sum(1))
    det = s0 * s2 - s1 ** 2
    weights = kernel * (s2[:, None] - u * s1[:, None]) / det[:, None]
    return (weights @ values.double()).to(values.dtype), weights.to(values.dtype)


@alternatives.keep("line in raw k, batched 2 x 2 solve, float32",
                   "design [1, k] (not centred at the query), one batched "
"torch.linalg.solve for all queries, the line a + b k read at k = q; float32 throughout")
def _local_alt_raw_k(queries, keys, values, width):
    # Fit v ~ c0 + c1 k by weighted least squares for every query at once, then evaluate at k = q.
    # Algebraically the same minimiser; in float32 the c0 + c1 q at q near 5 loses a few digits.
    if queries.dim() != 1:
        raise ValueError(f"queries: need a 1-D tensor, got {queries.dim()}-D")
    if keys.dim() != 1 or values.dim() != 1 or len(keys) != len(values) or len(keys) < 2:
        raise ValueError(f"keys {tuple(keys.shape)} / values {tuple(values.shape)}: need 1-D, same length >= 2")
    if not width > 0:
        raise ValueError(f"width must be > 0 (got {width})")
    sq = (queries[:, None] - keys[None, :]) ** 2                                  # (m, n)
    kernel = torch.exp(-(sq - sq.min(dim=1, keepdim=True).values) / (2 * width ** 2))
    design = torch.stack([torch.ones_like(keys), keys], dim=1)                    # (n, 2)
    xtk = design.T[None] * kernel[:, None, :]                                      # (m, 2, n): X^T K
    coef = torch.linalg.solve(xtk @ design, xtk)                                  # (m, 2, n)
    weights = coef[:, 0, :] + queries[:, None] * coef[:, 1, :]
    return weights @ values, weights


# Registration -----------------------------------------------------------------------------

register(Exercise(
    label="ch02_ex5", title="Local linear regression: fixing the boundary bias",
    name="local_linear", reference=local_linear, points=3,
    checks=[
        Check("12 queries inside [0.3, 4.7], 30 noisy keys, width 0.4", _local_calls, seed=0,
              compare=_compare_local,
              hint="this check compares (predictions, weights) at 12 queries inside the keys: minimise the "
                   "weighted squares for one query by any means of your own and compare its a with that row's "
                   "weights @ values, for the check's values and for other values; the reason above names the item that "
                   "differs."),
        Check("queries at the ends of [0, 5] and in the middle, width 0.3", _local_boundary_calls, seed=1,
              compare=_compare_local,
              hint="this check compares (predictions, weights) at queries 0, 0.1, 2.5, 4.9 and 5 with width "
                   "0.3, the first two and the last two outside or at the edge of the keys; row i of weights must "
                   "give the minimiser's a at query i for any values, and predictions = weights @ values; "
                   "the reason above names the item that differs."),
        Check("a straight line through unsorted keys is reproduced exactly", _local_line_calls, seed=2,
              compare=_compare_local,
              hint="this check's values lie on the line 1.5 - 0.8 x (25 unsorted keys, width 0.5): the "
                   "best line through them is that line, so the predictions lie on it, and the weights are "
                   "compared too; the reason above names the item that differs."),
        Check("a non-positive width or keys and values of different lengths raise ValueError",
              _local_bad_calls, seed=0, must_mention=_local_mentions, weight=ERROR_WEIGHT,
              hint="calls 1 and 2 pass width 0 and a negative width (name width); calls 3 to 5 keys and "
                   "values of different lengths, not 1-D, or of length 1 (name both)."),
        Check("fresh data, width and queries (hidden)", _local_hidden_calls, public=False, seed=3,
              compare=_compare_local,
              hint="a weighted line fitted around each query and read at the query, as in the public checks."),
    ],
    mistakes=list(mistakes),
    alternatives=list(alternatives),
))
