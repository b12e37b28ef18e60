"""Checking dropout by its properties, never by one random stream.

Two correct dropouts may draw their keep masks in different ways (``torch.rand_like(w) >= p``,
``torch.bernoulli``, ``nn.Dropout``'s own kernel), so their outputs for one seed differ. What
every correct *inverted* dropout with drop probability ``p`` has in common, and what
:func:`dropout_compare` tests:

* **eval mode is deterministic**: eval-mode calls (at several call seeds) equal the reference;
* **p = 0 in training mode equals eval mode** (a p = 0 call is compared with the reference);
* **unbiased**: the mean of ``K`` training-mode draws (each call with its own ``call_seed``)
  approaches the eval-mode output: at every entry ``|mean - eval| <= SIGMAS * se + ATOL +
  RTOL * |eval|``, with ``se`` the standard error estimated from the draws themselves (floored
  by ``sqrt(p / (1 - p)) * |eval| / sqrt(K)``, that of one weight dropped with probability
  ``p``, so that a rare drop cannot make it tiny); and, over the whole output, each draw's
  deviation projected on the eval output averages to 0 within ``SIGMAS`` standard errors;
* the same overall **size of the noise**: the summed variance of the draws, relative to that of
  the reference's draws, lies within a factor ``VARIANCE_FACTOR`` (drawn with ``p`` as the drop
  probability, the variance scales like ``p / (1 - p)``; taking ``p`` as the keep probability
  changes it by a large factor);
* where the output *is* the dropped tensor (``elementwise=True``): every entry is either ``0`` or
  its eval value times one common factor ``1 / (1 - p)``, and the fraction of zeros is ``p``
  within ``FRACTION_SIGMAS`` binomial standard errors;
* optionally (``proportional_to``): when every value vector of an attention layer is the same
  vector ``b``, dropout on the attention weights gives output rows that are multiples of ``b``
  (dropout on the outputs would zero single entries instead);
* optionally (``independent_along``): **independent drops**. For each listed axis of the examined
  tensor, along which the check's inputs make the eval output constant (uniform weights, a batch
  of equal sequences), the slices at indices ``2j`` and ``2j + 1`` are compared in every
  training draw; the fraction of such slice pairs that come out identical is measured the same
  way for the answer and the reference. Every weight dropped on its own makes two slices
  identical only when all their drops agree (probability ``(p^2 + (1-p)^2)^L`` for ``L`` weights
  per slice, near 0 in the checks), whereas one draw per row, one mask per column or one mask
  shared by the batch makes them identical in every draw. Under independent dropout the slice
  pairs of one draw, and the draws, are independent, so the two fractions (``N`` pairs each)
  may differ by at most ``IDENTICAL_SIGMAS`` standard errors of a difference of two binomial
  proportions, ``sqrt(2 f (1 - f) / N)`` with ``f`` their mean, plus ``IDENTICAL_SLACK``.

The statistics are computed the same way from the answer's outcomes and from the reference's
(or a kept mistake's) outcomes and then compared, so a kept mistake (say, survivors scaled by
``1 / p``) is recognised by behaving the same, whatever its random stream.

Calls are told apart by ``is_train(call)`` and ``p_of(call)``; all calls of one check must use
the same inputs, and at least one is an eval-mode call. The bounds are loose enough that a
correct dropout fails with a probability below about 1e-6 per check (at least 40 draws,
``p`` in [0.2, 0.6]).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch

from .checking import compare_outcome, compare_values
from .registry import Check

SIGMAS = 6.0            # standard errors allowed between the mean of the draws and eval mode
ATOL, RTOL = 1e-5, 1e-4
FRACTION_SIGMAS = 6.0   # binomial standard errors allowed for the fraction of zeros
VARIANCE_FACTOR = 2.0   # the draws' summed variance may differ from the reference's by this factor
SCALE_RTOL = 1e-3       # survivors share one factor, and it matches the reference's, to this
IDENTICAL_SIGMAS = 6.0  # standard errors allowed between two fractions of identical slice pairs
IDENTICAL_SLACK = 0.05  # plus this, so that a handful of coincidences never decides

_PLAIN = Check("outcome", lambda seed: [], hint="")


def first_tensor(value: Any) -> Any:
    """The tensor of an outcome value: the value itself, or the first item of a tuple/list."""
    if isinstance(value, dict):
        for key in ("__seq__", "__list__"):
            if key in value and value[key]:
                return value[key][0]
    return value


def _identical_fraction(D: torch.Tensor, axis: int) -> tuple:
    """Over the draws ``D`` (draw axis first), the fraction of slice pairs ``(2j, 2j + 1)``
    along ``axis`` of one draw that are identical, and the number of pairs."""
    axis = axis % (D.dim() - 1) + 1
    n = D.shape[axis] // 2 * 2
    if n == 0:
        return 0.0, 0
    even = D.narrow(axis, 0, n).unflatten(axis, (n // 2, 2)).select(axis + 1, 0)
    odd = D.narrow(axis, 0, n).unflatten(axis, (n // 2, 2)).select(axis + 1, 1)
    close = (even - odd).abs() <= 1e-6 * (even.abs() + odd.abs()) + 1e-9
    same = close.movedim(axis, 1).reshape(D.shape[0], n // 2, -1).all(-1)   # (draws, pairs)
    return float(same.double().mean()), same.numel()


def _stats(base: torch.Tensor, draws: list, p: float, elementwise: bool,
           proportional_to: Optional[torch.Tensor], independent_along: tuple = ()) -> dict:
    base = base.double()
    D = torch.stack([d.double() for d in draws])
    K = D.shape[0]
    mean = D.mean(0)
    # The standard error of each entry's mean, from the draws, floored by that of a single
    # weight dropped with probability p (a rare drop must not make a tiny sample error).
    floor = math.sqrt(p / (1 - p)) * base.abs() / math.sqrt(K)
    se = torch.maximum(D.std(0, unbiased=True) / math.sqrt(K), floor)
    excess = (mean - base).abs() - (SIGMAS * se + ATOL + RTOL * base.abs())
    worst = int(torch.argmax(excess).item())
    # One number per draw: its deviation from eval mode projected on the eval output; its mean
    # over the draws is 0 for an unbiased dropout, within SIGMAS standard errors.
    r = ((D - base) * base).flatten(1).sum(1) / max(float((base * base).sum()), 1e-12)
    r_mean, r_se = float(r.mean()), float(r.std(unbiased=True)) / math.sqrt(K)
    stats = {
        "unbiased": bool((excess <= 0).all()) and abs(r_mean) <= SIGMAS * r_se + 1e-4,
        "r": r_mean,
        "worst": (tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), base.shape)),
                  float(mean.flatten()[worst]), float(base.flatten()[worst])),
        "variance": float(D.var(0, unbiased=True).sum()),
        "identical": {axis: _identical_fraction(D, axis) for axis in independent_along},
    }
    if elementwise:
        live = (base.abs() > 1e-3).expand_as(D)
        big = base.abs().expand_as(D)
        zero = D.abs() <= ATOL
        dropped, kept = zero & live, ~zero & live
        n = int(live.sum())
        stats["n"] = n
        stats["fraction"] = float(dropped.sum()) / max(n, 1)
        ratios = D[kept] / base.expand_as(D)[kept]
        if ratios.numel():
            scale = float(ratios.median())
            stats["scale"] = scale
            spread = (ratios - scale).abs() / (abs(scale) + 1e-12)
            stats["one_scale"] = bool((spread <= SCALE_RTOL + 1e-4 / big[kept]).all())
        else:
            stats["scale"], stats["one_scale"] = 0.0, True
    if proportional_to is not None:
        b = proportional_to.double()
        coef = (D * b).sum(-1, keepdim=True) / (b * b).sum()
        off = (D - coef * b).abs().max().item()
        stats["proportional"] = off <= 1e-4 * (D.abs().max().item() + 1.0)
    return stats


def dropout_compare(p_of: Callable, is_train: Callable, elementwise: bool = False,
                    proportional_to: Optional[Callable] = None, pick: Callable = first_tensor,
                    rtol: float = RTOL, atol: float = ATOL, independent_along: tuple = (),
                    axis_names: Optional[dict] = None) -> Callable:
    """A ``Check.compare`` function for calls that run dropout (see the module docstring).

    ``p_of(call)`` is the drop probability of a call, ``is_train(call)`` whether it runs in
    training mode, ``pick(value)`` the tensor to examine in an outcome's value, and
    ``proportional_to(call)`` (optional) the vector every output row must be a multiple of in
    training mode. ``independent_along`` lists axes of that tensor along which the eval output
    is constant and no drop pattern may be shared (``axis_names`` names them in the reason).
    """
    names = axis_names or {}

    def compare(got: list, want: list, calls: list) -> Optional[str]:
        for i, (g, w, c) in enumerate(zip(got, want, calls)):
            if g["status"] != "ok" or w["status"] != "ok":
                reason = compare_outcome(g, w, _PLAIN, c, require_message=False)
                if reason:
                    return f"call {i + 1} of {len(calls)}: {reason}"
        draws_g, draws_w, base_g, base_w, p_draw = [], [], None, None, None
        for i, (g, w, c) in enumerate(zip(got, want, calls)):
            gv, wv = pick(g["value"]), pick(w["value"])
            if not isinstance(wv, torch.Tensor):
                reason = compare_values(g["value"], w["value"], rtol, atol)
                if reason:
                    return reason
                continue
            if not isinstance(gv, torch.Tensor) or gv.dtype != wv.dtype or gv.shape != wv.shape:
                return compare_values(gv, wv, rtol, atol)
            train, p = is_train(c), p_of(c)
            if not train or p == 0:
                reason = compare_values(gv, wv, rtol, atol)
                if reason:
                    mode = "eval mode" if not train else "training mode with p=0"
                    return f"{mode} (call {i + 1} of {len(calls)}): {reason}"
                if not train and base_g is None:
                    base_g, base_w = gv, wv
                continue
            draws_g.append(gv)
            draws_w.append(wv)
            p_draw = p
        if not draws_g:
            return None
        if base_g is None:
            raise ValueError("a dropout check needs an eval-mode call beside its training draws")
        b = proportional_to(calls[0]) if proportional_to else None
        sg = _stats(base_g, draws_g, p_draw, elementwise, b, tuple(independent_along))
        sw = _stats(base_w, draws_w, p_draw, elementwise, b, tuple(independent_along))
        k = len(draws_g)
        if elementwise:
            if sg["one_scale"] != sw["one_scale"]:
                return (f"in training mode each entry should be either 0 or its eval-mode value times one "
                        f"common factor (p={p_draw}); {'yours are not' if not sg['one_scale'] else 'yours are'}")
            if sw["one_scale"] and not math.isclose(sg["scale"], sw["scale"], rel_tol=SCALE_RTOL):
                return (f"the entries kept in training mode are multiplied by {sg['scale']:.4g}; for "
                        f"p={p_draw} the factor should be {sw['scale']:.4g}")
            n = min(sg["n"], sw["n"])
            bound = FRACTION_SIGMAS * math.sqrt(2 * p_draw * (1 - p_draw) / max(n, 1)) + 0.005
            if abs(sg["fraction"] - sw["fraction"]) > bound:
                return (f"a fraction {sg['fraction']:.3f} of the entries is zeroed over {k} training-mode "
                        f"draws with p={p_draw}; expected about {sw['fraction']:.3f}")
        if sg["unbiased"] != sw["unbiased"]:
            if not sg["unbiased"]:
                where, m, e = sg["worst"]
                return (f"the mean of {k} training-mode draws (p={p_draw}) does not approach the eval-mode "
                        f"output (on average the draws are {1 + sg['r']:.3f} times the eval output; at index "
                        f"{where} the mean is {m:.4g}, eval mode gives {e:.4g}): dropout must keep every "
                        f"expected value")
            return f"the mean of {k} training-mode draws (p={p_draw}) equals the eval-mode output, expected not"
        vg, vw = sg["variance"], sw["variance"]
        if vw > 1e-12 or vg > 1e-12:
            ratio = (vg + 1e-12) / (vw + 1e-12)
            if not 1 / VARIANCE_FACTOR <= ratio <= VARIANCE_FACTOR:
                return (f"the training-mode draws (p={p_draw}) vary {ratio:.2f} times as much as they should "
                        f"(summed variance over {k} draws): check which entries are dropped, with which "
                        f"probability, and the scale of the survivors")
        for axis in independent_along:
            (fg, n), (fw, _) = sg["identical"][axis], sw["identical"][axis]
            if n == 0:
                continue
            mean = (fg + fw) / 2
            bound = IDENTICAL_SIGMAS * math.sqrt(2 * mean * (1 - mean) / n) + IDENTICAL_SLACK
            if abs(fg - fw) > bound:
                what = names.get(axis, f"slices along axis {axis}")
                return (f"two {what} whose eval-mode values are equal came out identical in {fg:.0%} of "
                        f"{n} training-mode pairs (p={p_draw}); with every weight dropped independently "
                        f"this happens in about {fw:.0%}")
        if b is not None and sg["proportional"] != sw["proportional"]:
            return ("with every value vector equal to the same vector, each output row in training mode "
                    + ("should be a multiple of it (dropout belongs on the attention weights)"
                       if sw["proportional"] else "should not be a multiple of it"))
        return None

    return compare


def draw_calls(make_call: Callable, seeds: range, p: float, eval_seeds=(1, 2), p0_call=None) -> list:
    """The usual call list: eval-mode calls at ``eval_seeds``, then one training draw per
    seed in ``seeds``; ``make_call(train, call_seed)`` builds one call with the same inputs."""
    calls = [make_call(False, s) for s in eval_seeds]
    if p0_call is not None:
        calls.append(p0_call)
    calls += [make_call(True, s) for s in seeds]
    return calls


# Where the dropout acts. With W_value's weight 0 and its bias v, every value vector is v; with
# out_proj's bias 0, out_proj's input is recovered from the output through out_proj's weight
# (orthogonal here, so exactly). Dropout on the attention weights only rescales a query's weights,
# so head h's share of out_proj's input is one factor times v_h, in every draw. Dropout on
# out_proj's output zeroes single output entries; on the merged heads, single features of
# out_proj's input; on the values, it makes the features of one head differ in scale.

def multihead_placement(draws, call):
    """How the training-mode draws of a multi-head layer (ch06_ex1) vary, on calls whose layer
    has W_value's weight 0 (every value vector is its bias v) and an orthogonal out_proj with
    bias 0: 'weights' (head h's share of out_proj's input is a multiple of v_h in every draw),
    'output' (single output entries are 0), 'merged' (single features of out_proj's input are
    0) or 'other'; with the numbers seen."""
    p, heads = call.init_args[3], call.init_args[4]
    w_o, v = call.state_dict["out_proj.weight"].double(), call.state_dict["W_value.bias"].double()
    out = torch.stack([d.double() for d in draws])                      # (K, batch, tokens, d_out)
    merged = out @ torch.linalg.inv(w_o).T                              # out = merged @ w_o.T
    hd = v.numel() // heads
    blocks, vs = merged.unflatten(-1, (heads, hd)), v.view(heads, hd)
    coef = (blocks * vs).sum(-1, keepdim=True) / (vs * vs).sum(-1, keepdim=True)
    off = (blocks - coef * vs).abs().amax(-1)                           # (K, batch, tokens, heads)
    bad_rows = (off > 1e-4 * (merged.abs().max().item() + 1.0)).any(-1)
    # Zeros among rows (of the output) or head blocks (of out_proj's input) that are not all zero:
    # a query whose weights are all dropped gives a zero row, which is correct.
    tiny = 1e-5 * (out.abs().max().item() + 1.0)
    out_zero = out.abs() <= tiny
    live_rows = ~out_zero.all(-1, keepdim=True)
    out_frac = float((out_zero & live_rows).sum()) / max(int(live_rows.sum()) * out.shape[-1], 1)
    blk_zero = blocks.abs() <= tiny
    live_blk = ~blk_zero.all(-1, keepdim=True)
    blk_frac = float((blk_zero & live_blk).sum()) / max(int(live_blk.sum()) * hd, 1)
    if not bool(bad_rows.any()):
        kind = "weights"
    elif out_frac > p / 2:
        kind = "output"
    elif blk_frac > p / 2:
        kind = "merged"
    else:
        kind = "other"
    return {"kind": kind, "bad_draws": int(bad_rows.flatten(1).any(1).sum()), "k": len(draws),
            "out_frac": out_frac, "blk_frac": blk_frac}


def placement_text(st):
    if st["kind"] == "weights":
        return "in every draw"
    text = f"not in {st['bad_draws']} of {st['k']} draws"
    if st["kind"] == "output":
        text += f"; a fraction {st['out_frac']:.2f} of the output entries (in rows not all 0) is exactly 0"
    elif st["kind"] == "merged":
        text += (f"; a fraction {st['blk_frac']:.2f} of the features of out_proj's input (in head blocks "
                 f"not all 0) is exactly 0")
    else:
        text += "; no single output entry or feature of out_proj's input is zeroed"
    return text
