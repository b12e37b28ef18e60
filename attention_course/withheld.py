"""Stand-ins for library pieces that an instructor's release withholds.

In a student build (:mod:`attention_course.tools.student_build`), a library function or class that
is the answer to an exercise graded in that release is not shipped. Its name stays, bound to
a stand-in made here, so that the chapter's cells and exercises that use it keep working.

**What a stand-in does, in this order** (plain Python, so it behaves alike in JupyterLab, Colab,
VS Code and a script; no notebook extension, and no cell of the notebook is changed):

1. Called again from inside the student's own answer of the same name (``masked_softmax`` that
   calls ``attn.masked_softmax``): it raises the course's "no credit" error, as ``check()`` and
   the grader do with the full package (never a RecursionError).
2. Called by another exercise's public check on the very inputs the release recorded for it
   (ch03_ex2's check reaching ``attn.masked_softmax``): it gives **the course's result**, so an
   exercise that does not depend on an earlier one does not depend on it in the release either.
3. Otherwise it calls (or builds) the student's own ``answer_name`` defined in the notebook.
4. When that is not written yet (not defined, or still the stub raising ``chNN_exM: implement``),
   a worked example on inputs the release recorded replays **the course's result** and prints a
   one-line note naming the exercise (once per cell). So "Run All" never stops on a worked
   example; once the student has answered, the examples run on the student's own answer.
5. Anything else raises :class:`WithheldError`, which says which exercise to do first.

The recorded calls (``public_checks/withheld_calls.pt``, plain tensors loaded with
``weights_only=True``) are results on fixed inputs: outputs, and where a gradient is needed the
Jacobian on those inputs, never code. A replayed module (a worked example that builds a withheld
class) is rebuilt from torch's own layers with the recorded parameters and plain settings
(``head_dim``, ``num_heads``); its ``forward`` replays any call recorded with the same weights
(chapter 6 builds a layer, copies weights into it, builds another alike and loads the first's
``state_dict``). A worked example that shows the piece refusing its input replays the error (its
built-in type and words). A worked example's call also carries torch's random state before and
after it: of two recorded calls alike (a layer built twice with the same arguments) the one made
from the present state is replayed, and on the recorded path the state is left where the piece
itself left it, so the cells after it draw the numbers they drew when the course ran them.
Nothing here holds an answer; the full course package never uses this module.
"""
from __future__ import annotations

import builtins
import sys
import threading
from pathlib import Path
from typing import Any

import torch
from torch import nn

CALLS_FILE = Path(__file__).resolve().parent / "public_checks" / "withheld_calls.pt"
_state = threading.local()
_loaded: dict = {}
_noted: set = set()


class WithheldError(NotImplementedError):
    """A withheld piece was used before the student's own answer was defined."""


def no_credit_message(where: str, label: str, answer_name: str) -> str:
    """The words of :func:`attention_course.checks.answers.no_credit_message`, for a stand-in."""
    return (f"{where} is the course's answer to {label}: no credit for calling it; "
            f"write your own {answer_name}")


def recorded(where: str) -> dict:
    """The calls recorded for ``where`` when the release was made (empty in the full course)."""
    if "all" not in _loaded:
        _loaded["all"] = torch.load(CALLS_FILE, weights_only=True) if CALLS_FILE.is_file() else {}
    return _loaded["all"].get(where, {})


# ---------------------------------------------------------------- matching recorded inputs

def _same(got, want) -> bool:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            return False
        got = got.detach()
        if want.is_floating_point():
            return bool(torch.allclose(got, want, rtol=1e-4, atol=1e-6, equal_nan=True))
        return bool(torch.equal(got, want))
    if isinstance(want, (list, tuple)):
        return isinstance(got, (list, tuple)) and len(got) == len(want) and all(map(_same, got, want))
    return type(got) is type(want) and got == want


def _find(entries, args, kwargs):
    for entry in entries or ():
        if len(args) == len(entry["args"]) and set(kwargs) == set(entry["kwargs"]) \
                and all(map(_same, args, entry["args"])) and all(_same(kwargs[k], entry["kwargs"][k]) for k in kwargs):
            return entry
    return None


def _pick(entries, args, kwargs):
    """The worked example's call recorded for these inputs; of several alike (a layer of random
    weights built twice with the same arguments), the one made from torch's present random state."""
    found = [entry for entry in entries or () if _find([entry], args, kwargs) is not None]
    if len(found) > 1:
        state = torch.get_rng_state()
        found.sort(key=lambda entry: not _on_path(entry, state))  # stable: else the first recorded
    return found[0] if found else None


def _on_path(entry, state=None) -> bool:
    """Is torch's random state the one the recorded call started from?"""
    before = entry.get("rng")
    return isinstance(before, torch.Tensor) and isinstance(entry.get("rng_after"), torch.Tensor) and \
        torch.equal(before, torch.get_rng_state() if state is None else state)


def _recorded_error(entry) -> Exception:
    """The error a worked example showed the piece raising (its type, built-in, and its words)."""
    name, message = entry["raises"]
    kind = getattr(builtins, name, None)
    return (kind if isinstance(kind, type) and issubclass(kind, Exception) else RuntimeError)(message)


def _replay(entry, args, kwargs):
    """The recorded result, with gradients through the recorded Jacobians (its value is exact)."""
    if "raises" in entry:
        raise _recorded_error(entry)
    outputs = [t.clone() for t in entry["out"]]
    for key, jacobians in entry.get("jac", {}).items():
        given = kwargs[key[2:]] if key.startswith("k:") else args[int(key[2:])]
        if not (isinstance(given, torch.Tensor) and given.requires_grad and torch.is_grad_enabled()):
            continue
        zero = (given - given.detach()).reshape(-1)  # zero, with the student's graph behind it
        outputs = [out + (jac.to(zero.dtype) @ zero).reshape(out.shape).to(out.dtype)
                   for out, jac in zip(outputs, jacobians)]
    return tuple(outputs) if entry["tuple"] else outputs[0]


def _note(where: str, label: str, answer_name: str) -> None:
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    key = (where, getattr(shell, "execution_count", None))
    if key not in _noted:
        _noted.add(key)
        print(f"(this example runs on your {answer_name} once you have written {label}; "
              f"until then its results are the course's)")


# ---------------------------------------------------------------- the stand-ins

def _own_answer(where: str, label: str, answer_name):
    if answer_name is None:  # a piece with a contract of its own: nothing of the student's fits it
        raise WithheldError(f"{where} is withheld in this release: it answers {label}, which is graded. "
                            "It ships with a later release, after the deadline.")
    main = sys.modules.get("__main__")
    own = getattr(main, answer_name, None)
    own_module = getattr(own, "__module__", "") or ""
    if own is None or own_module.split(".")[0] == __name__.split(".")[0]:
        return None
    return own


def _not_written(where: str, label: str, answer_name: str) -> WithheldError:
    return WithheldError(
        f"{where} is withheld in this release: it is the answer to {label}, which is graded. "
        f"Until it is released, the course uses your own {answer_name}: run your {label} cell first.")


def _is_stub(error: BaseException, label: str) -> bool:
    return type(error) is NotImplementedError and str(error).startswith(f"{label}:")


def _call(where: str, label: str, answer_name, args, kwargs, build=None):
    active = _state.__dict__.setdefault("active", set())
    if where in active:
        raise WithheldError(no_credit_message(where, label, answer_name))
    calls = recorded(where)
    entry = _find(calls.get("check"), args, kwargs)
    if entry is not None:
        return _replay(entry, args, kwargs)
    own = _own_answer(where, label, answer_name)
    if own is not None:
        active.add(where)
        try:
            return own(*args, **kwargs)
        except NotImplementedError as error:
            if not _is_stub(error, label):
                raise
        finally:
            active.discard(where)
    entry = (build or _pick)(calls.get("example"), args, kwargs)
    if entry is None:
        raise _not_written(where, label, answer_name)
    _note(where, label, answer_name)
    if build:
        if isinstance(entry, Exception):
            raise entry
        return entry
    if _on_path(entry):  # leave torch's random state where the piece itself left it
        torch.set_rng_state(entry["rng_after"])
    return _replay(entry, args, kwargs)


def function(where: str, label: str, answer_name):
    """A function that stands in for a withheld one (see the module's docstring: the student's
    own ``answer_name``, or the course's recorded result; None: one that always raises)."""
    def stand_in(*args, **kwargs):
        return _call(where, label, answer_name, args, kwargs)
    stand_in.__name__ = stand_in.__qualname__ = where.rsplit(".", 1)[-1]
    stand_in.__doc__ = f"Withheld in this release (the answer to {label}): calls your own {answer_name}."
    return stand_in


class _Replayed(nn.Module):
    """A withheld module of a worked example, rebuilt from torch's layers; ``forward`` replays."""

    def __init__(self, entry: dict):
        super().__init__()
        for name, kind, options in entry["children"]:
            self.add_module(name, getattr(nn, kind)(**dict(options)))
        for name, value in entry["state"].items():
            if "." not in name and not hasattr(self, name):
                self.register_parameter(name, nn.Parameter(value.clone()))
        self.load_state_dict(entry["state"])
        for name, value in entry.get("attrs", {}).items():  # plain settings: head_dim, num_heads
            if not hasattr(self, name):
                setattr(self, name, value)
        self._calls = entry["forward"]
        self._where = entry["where"]

    def forward(self, *args, **kwargs):
        state = self.state_dict()
        # Its own recorded calls first, then any made with the same weights by another module of
        # the examples (a layer built again, then loaded with this one's state_dict).
        others = [call for e in recorded(self._where).get("example", ()) for call in e.get("forward", ())]
        for call in self._calls + others:
            if all(torch.equal(state[k], v) for k, v in call["state"].items()) and _find([call], args, kwargs):
                return _replay(call, args, kwargs)
        raise WithheldError(f"{self._where} is withheld in this release: the course's results are known for "
                            "the chapter's worked examples only; write the exercise to run it on other inputs.")


class _StandInClass:
    _where = _label = _answer_name = ""

    def __new__(cls, *args, **kwargs):
        def build(entries, a, k):
            entry = _pick(entries, a, k)
            if entry is None:
                return None
            on_path = _on_path(entry)  # before the rebuilt layers draw their own random weights
            built = _recorded_error(entry) if "raises" in entry else _Replayed(dict(entry, where=cls._where))
            if on_path:
                torch.set_rng_state(entry["rng_after"])
            return built
        return _call(cls._where, cls._label, cls._answer_name, args, kwargs, build=build)


def cls(where: str, label: str, answer_name) -> type:
    """A class whose construction builds the student's own ``answer_name`` (or, in a worked
    example before it is written, the course's replayed module; None: always raises)."""
    name = where.rsplit(".", 1)[-1]
    return type(name, (_StandInClass,), {
        "_where": where, "_label": label, "_answer_name": answer_name,
        "__doc__": f"Withheld in this release (the answer to {label}): builds your own {answer_name}.",
        "__module__": __name__})
