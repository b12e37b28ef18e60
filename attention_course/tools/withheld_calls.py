"""The calls of withheld pieces, recorded for a student build (:mod:`attention_course.tools.student_build`).

A release withholds the library functions and classes that answer its graded exercises. Its worked
examples and the public checks still call them, so :func:`record_withheld_calls` runs those examples
and checks with the real pieces once, at release, and records every call (arguments, outputs,
gradients up to a size, a layer's plain settings, the errors raised, torch's random state): the
release's stand-ins (:mod:`attention_course.withheld`) replay them (``withheld_calls.pt``).
"""
from __future__ import annotations

import inspect
from typing import Optional

import torch

from .stored_checks import PACKAGE, StudentBuildError

CALLS_NAME = "withheld_calls.pt"
JACOBIAN_LIMIT = 10 ** 6  # entries of one Jacobian: larger ones are not recorded (no gradient replayed)


class _Unstorable(Exception):
    pass


def _storable(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_storable(v) for v in value]
    raise _Unstorable(type(value).__name__)


def _outputs(result):
    if isinstance(result, torch.Tensor):
        return [result.detach().clone()], False
    if isinstance(result, tuple) and result and all(isinstance(t, torch.Tensor) for t in result):
        return [t.detach().clone() for t in result], True
    raise _Unstorable(type(result).__name__)


def _module_spec(module) -> Optional[list]:
    """``[(name, torch.nn class name, options)]`` of a module built only of torch's own layers."""
    spec = []
    for name, child in module.named_children():
        kind = type(child).__name__
        if not type(child).__module__.startswith("torch.nn.") or getattr(torch.nn, kind, None) is not type(child) \
                or list(child.children()):
            return None
        options = {}
        for parameter in inspect.signature(type(child).__init__).parameters:
            if parameter in ("self", "device", "dtype") or not hasattr(child, parameter):
                continue
            value = getattr(child, parameter)
            if parameter == "bias" and (value is None or isinstance(value, torch.Tensor)):
                value = value is not None
            if not isinstance(value, (bool, int, float, str, tuple, type(None))):
                return None
            options[parameter] = value
        spec.append((name, kind, options))
    return spec


def _plain_attributes(module) -> dict:
    """A module's plain settings (``head_dim``, ``num_heads``: numbers and words set by its
    constructor), which a worked example may read from a replayed module; no tensor, no code."""
    return {name: value for name, value in vars(module).items()
            if not name.startswith("_") and name != "training"
            and isinstance(value, (bool, int, float, str, type(None)))}


class _Recorder:
    """Patches the withheld pieces of the full package so that their calls are recorded."""

    def __init__(self, pieces):
        import importlib
        self.pieces = [p for p in pieces if p.delegates]
        self.calls = {f"{PACKAGE}.{p.module}.{p.attr}": {"check": [], "example": []} for p in self.pieces}
        self.phase, self.label, self.depth = None, None, 0
        self.originals = [(importlib.import_module(f"{PACKAGE}.{p.module}"), p) for p in self.pieces]

    def __enter__(self):
        for module, piece in self.originals:
            original = getattr(module, piece.attr)
            setattr(module, piece.attr, (self._class if piece.is_class else self._function)(piece, original))
        return self

    def __exit__(self, *exc):
        for module, piece in self.originals:
            setattr(module, piece.attr, getattr(module, piece.attr).__wrapped__)

    def _wanted(self, piece) -> bool:
        return self.depth == 0 and self.phase is not None and piece.label != self.label and \
            (self.phase == "example" or not piece.is_class)

    def _record_raise(self, piece, args, kwargs, error, rng) -> None:
        """A worked example that shows the piece refusing its input (a ``ValueError`` it prints):
        the error's type and words, so the stand-in raises them too (built-in types only)."""
        if type(error).__module__ != "builtins" or not isinstance(error, Exception):
            return
        try:
            entry = {"args": _storable(list(args)), "kwargs": {k: _storable(v) for k, v in kwargs.items()},
                     "out": [], "tuple": False, "jac": {}, "raises": [type(error).__name__, str(error)]}
        except _Unstorable:
            return
        entry.update(rng=rng, rng_after=torch.get_rng_state())
        self.calls[f"{PACKAGE}.{piece.module}.{piece.attr}"][self.phase].append(entry)

    def _function(self, piece, original):
        def recording(*args, **kwargs):
            wanted = self._wanted(piece)
            # A worked example's call also keeps torch's random state before and after it, so that
            # a replay on the recorded path leaves the state as the piece itself would have.
            rng = torch.get_rng_state() if wanted and self.phase == "example" else None
            self.depth += 1
            try:
                result = original(*args, **kwargs)
            except Exception as error:
                if rng is not None:
                    self._record_raise(piece, args, kwargs, error, rng)
                raise
            finally:
                self.depth -= 1
            after = torch.get_rng_state() if rng is not None else None
            if wanted:
                self.depth += 1
                try:
                    entry = self._entry(original, args, kwargs, result)
                    if rng is not None:
                        entry.update(rng=rng, rng_after=after)
                    self.calls[f"{PACKAGE}.{piece.module}.{piece.attr}"][self.phase].append(entry)
                except _Unstorable:
                    pass
                finally:
                    self.depth -= 1
            return result
        recording.__wrapped__ = original
        return recording

    @staticmethod
    def _entry(original, args, kwargs, result, jacobians=True) -> dict:
        out, is_tuple = _outputs(result)
        entry = {"args": _storable(list(args)), "kwargs": {k: _storable(v) for k, v in kwargs.items()},
                 "out": out, "tuple": is_tuple, "jac": {}}
        places = [(f"a:{i}", v) for i, v in enumerate(args)] + [(f"k:{k}", v) for k, v in kwargs.items()]
        for key, value in places if jacobians else ():
            if not (isinstance(value, torch.Tensor) and value.requires_grad and value.is_floating_point()):
                continue
            if value.numel() * sum(t.numel() for t in out) > JACOBIAN_LIMIT:
                continue

            def of(x, key=key):
                a = [x if f"a:{i}" == key else v for i, v in enumerate(args)]
                k = {n: x if f"k:{n}" == key else v for n, v in kwargs.items()}
                return original(*a, **k)
            with torch.enable_grad():
                jac = torch.autograd.functional.jacobian(of, value.detach().clone())
            jac = list(jac) if is_tuple else [jac]
            entry["jac"][key] = [torch.nan_to_num(j.reshape(o.numel(), value.numel())) for j, o in zip(jac, out)]
        return entry

    def _class(self, piece, original):
        recorder = self

        def building(*args, **kwargs):
            wanted = self._wanted(piece)
            rng = torch.get_rng_state() if wanted else None
            try:
                instance = original(*args, **kwargs)
            except Exception as error:
                if wanted:
                    self._record_raise(piece, args, kwargs, error, rng)
                raise
            after = torch.get_rng_state() if wanted else None
            spec = _module_spec(instance) if wanted else None
            if spec is None:
                return instance
            try:
                entry = {"args": _storable(list(args)), "kwargs": {k: _storable(v) for k, v in kwargs.items()},
                         "children": spec, "state": {k: v.detach().clone() for k, v in instance.state_dict().items()},
                         "attrs": _plain_attributes(instance), "rng": rng, "rng_after": after, "forward": []}
            except _Unstorable:
                return instance
            recorder.calls[f"{PACKAGE}.{piece.module}.{piece.attr}"]["example"].append(entry)
            forward = instance.forward

            def recording_forward(*a, **k):
                result = forward(*a, **k)
                try:
                    call = recorder._entry(forward, a, k, result, jacobians=False)
                    call["state"] = {n: v.detach().clone() for n, v in instance.state_dict().items()}
                    entry["forward"].append(call)
                except _Unstorable:
                    pass
                return result
            instance.forward = recording_forward
            return instance
        building.__wrapped__ = original
        return building


def _run_examples(cells: list) -> None:
    """Run a chapter's worked examples (code cells, in order) as a notebook would, quietly."""
    import contextlib
    import io
    import random
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    options = torch._tensor_str.PRINT_OPTS
    saved = (torch.get_rng_state(), random.getstate(),
             {k: getattr(options, k) for k in ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")})
    show = plt.show
    plt.show = lambda *a, **k: None
    namespace = {"__name__": "__main__"}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            for index, source in cells:
                code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
                try:
                    exec(compile(code, f"<worked example, cell {index}>", "exec"), namespace)  # noqa: S102
                except Exception as error:  # noqa: BLE001
                    raise StudentBuildError(f"a worked example (cell {index}) failed while its results were "
                                            f"recorded for the release: {type(error).__name__}: {error}") from error
    finally:
        plt.show = show
        plt.close("all")
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        for key, value in saved[2].items():
            setattr(options, key, value)


def record_withheld_calls(pieces: list, labels: list, examples: dict) -> dict:
    """The calls of the withheld pieces that the release replays (:mod:`attention_course.withheld`):
    ``{where: {"check": [...], "example": [...]}}``.

    ``check``: calls made by the public checks of the released exercises other than the piece's
    own, run on the reference and every kept mistake, so that a student's answer that behaves
    like one of them meets the course's result there. ``example``: calls made by the worked
    examples ``examples`` (``{chapter: [(cell index, source)]}``), run on the full package.
    """
    from ..checks.plan import outcomes_for
    from ..checks.registry import get_exercise
    from ..withheld import _find
    recorder = _Recorder(pieces)
    if not recorder.pieces:
        return {}
    with recorder:
        recorder.phase = "check"
        # Only a piece's own chapter may use it (student_build.uses_of_withheld refuses the rest).
        chapters = {get_exercise(p.label).chapter for p in recorder.pieces if not p.is_class}
        for label in labels:
            exercise = get_exercise(label)
            if exercise.chapter not in chapters:
                continue
            recorder.label = label
            for check in exercise.public_checks:
                calls = check.make_calls(check.seed)
                for impl in [exercise.reference] + [m.impl for m in exercise.mistakes]:
                    outcomes_for(impl, calls, exercise.kind)
        recorder.phase, recorder.label = "example", None
        for chapter in sorted(examples):
            _run_examples(examples[chapter])
    # Never the piece's own exercise's inputs: its answer cannot be had from the release.
    for piece in recorder.pieces:
        entries = recorder.calls[f"{PACKAGE}.{piece.module}.{piece.attr}"]
        for check in get_exercise(piece.label).public_checks:
            for call in check.make_calls(check.seed):
                for phase in ("check", "example"):
                    while (hit := _find(entries[phase], list(call.args), dict(call.kwargs))) is not None:
                        entries[phase] = [e for e in entries[phase] if e is not hit]
    return {where: entries for where, entries in recorder.calls.items() if entries["check"] or entries["example"]}
