"""Helpers shared by the exercise modules of every chapter (one copy each).

A helper used by one chapter only lives in that chapter's ``_common.py``; a helper used
by one exercise only lives in that exercise's module. What is here:

* :class:`Kept` -- keeps a kept mistake beside its hint (or a kept alternative beside its
  style): ``@mistakes.keep("name", "hint")`` on the wrong implementation itself;
* :func:`gen`, :func:`randint` -- the seeded draws every check's inputs come from;
* :func:`shape_of` -- a shape as a plain tuple, for error messages;
* :data:`ERROR_WEIGHT` -- the weight of an error-message check;
* :func:`finite_then_close` and :func:`same_parameters` -- compares used by several chapters;
* :func:`inputs_unchanged` -- a check's calls that also fail an answer changing an argument in place;
* :func:`qkv_state` -- the state dict of the projections W_query, W_key, W_value that chapter 5's
  causal attention and chapter 6's multi-head attention load.
"""
from __future__ import annotations

import torch

from ..checks.registry import Check

ERROR_WEIGHT = 0.5  # an error-message check weighs half a value check


class Kept:
    """The kept mistakes (or kept alternatives) of one exercise, in the order they are kept.

    ``kind`` is :class:`~attention_course.checks.registry.Mistake` or
    :class:`~attention_course.checks.registry.Alternative`; both take ``(name, text, impl)``,
    where ``text`` is the mistake's hint or the alternative's style. Keep a function or
    a class with the decorator, so that its hint sits right above its code::

        mistakes = Kept(Mistake)

        @mistakes.keep("divided by num_keys", "the result was divided by ...")
        def _pool_divided_by_num_keys(weights, values):
            ...

    and anything else (a lambda, a factory's product) with ``mistakes.add(name, text, impl)``.
    Both return the implementation unchanged, so it can still be used by name. The
    exercise's ``register`` call takes ``mistakes=list(mistakes)``.
    """

    def __init__(self, kind):
        self.kind = kind
        self.items: list = []

    def add(self, name: str, text: str, impl):
        if any(item.name == name for item in self.items):
            raise ValueError(f"two kept {self.kind.__name__.lower()}s are named {name!r}")
        self.items.append(self.kind(name, text, impl))
        return impl

    def keep(self, name: str, text: str):
        def decorate(impl):
            return self.add(name, text, impl)
        return decorate

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


def gen(seed: int) -> torch.Generator:
    """A local generator: a check's inputs are drawn from its seed only, never the global RNG."""
    return torch.Generator().manual_seed(seed)


def randint(g, low, high) -> int:
    """An integer in [low, high] (both included), drawn from ``g``."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def shape_of(t):
    """The shape of a tensor as a plain tuple; the type's name for anything without a shape."""
    if isinstance(t, torch.Tensor):
        return tuple(t.shape)
    return tuple(t.shape) if hasattr(t, "shape") else type(t).__name__


def qkv_state(g, d_in, d_out, bias=False):
    """The weights (and with ``bias`` the biases) of W_query, W_key and W_value, each an
    ``nn.Linear(d_in, d_out)``, drawn from ``g`` in this order: weight * 0.6, bias * 0.3.

    Used by ch05_ex3 (CausalAttention) and ch06_ex1 (MultiHeadAttention, whose ``_mha_state``
    draws out_proj's weight and bias after these). Chapter 4's ``_sa_state`` stays apart: it
    divides its weights by sqrt(d_in), and a division is not bitwise a multiplication, so
    sharing this would change the inputs of its checks.
    """
    state = {}
    for name in ("W_query", "W_key", "W_value"):
        state[f"{name}.weight"] = torch.randn(d_out, d_in, generator=g) * 0.6
        if bias:
            state[f"{name}.bias"] = torch.randn(d_out, generator=g) * 0.3
    return state


def tensors_of(value):
    """Every tensor inside a recorded outcome value (a tensor, or a recorded tuple/list)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.get("__seq__", value.get("__list__", [])):
            yield from tensors_of(item)


def finite_then_close(rtol, atol):
    """A compare for checks that promise finite results: every returned tensor must be finite
    wherever the reference's is (said plainly when it is not), then agree within rtol/atol."""
    from ..checks.checking import compare_all

    def compare(got, want, calls):
        for i, (g, w) in enumerate(zip(got, want)):
            if g.get("status") != "ok" or w.get("status") != "ok":
                continue
            for gt, wt in zip(tensors_of(g["value"]), tensors_of(w["value"])):
                if gt.is_floating_point() and wt.is_floating_point() and gt.shape == wt.shape \
                        and bool((~torch.isfinite(gt) & torch.isfinite(wt)).any()):
                    where = "the result" if len(got) == 1 else f"call {i + 1} of {len(got)}: the result"
                    return f"{where} has NaN or inf entries (it must stay finite)"
        return compare_all(got, want, Check("", lambda s: [], "", rtol=rtol, atol=atol), calls)
    return compare


def same_parameters(got, want, calls):
    """A compare for ``report=("param_shapes",)`` calls: the same parameter names and shapes.

    Where the reference raises (an invalid configuration), the answer must raise the same
    exception type (or a subclass). Chapter 3's copy did this and chapter 7's did not;
    chapter 7's checks make no raising call, so both chapters keep their behaviour and the
    rule that holds for every other compare (an expected error is an outcome to match,
    not a failure) holds here too.
    """
    for g, w in zip(got, want):
        if w["status"] == "raised":
            if g["status"] == "raised" and w["error_type"] in g.get("error_mro", []):
                continue
            return f"should raise {w['error_type']}"
        if g["status"] != "ok":
            return f"raised {g['error_type']}: {g['message'][:300]}"
        mine, theirs = g.get("extras", {}).get("param_shapes"), w["extras"]["param_shapes"]
        if mine != theirs:
            return f"the parameters (name: shape) are {mine}, expected {theirs}"
    return None


def inputs_unchanged(make_calls):
    """``make_calls`` whose calls also record the tensor arguments the call changed in place
    (``report=("inputs_unchanged",)``): every compare of the check, a custom one too, then fails an
    answer that writes into an argument the reference leaves as it was, naming that argument."""
    import dataclasses

    def calls(seed):
        return [dataclasses.replace(c, report=tuple(c.report) + ("inputs_unchanged",)) for c in make_calls(seed)]
    calls.__name__ = calls.__qualname__ = getattr(make_calls, "__name__", "calls")
    return calls
