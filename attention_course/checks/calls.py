"""Run a :class:`~attention_course.checks.registry.Call` on an object and record the outcome
as plain data.

This module holds no reference solution and no check: it is all that an untrusted
grading child needs to compute a student's outputs. An outcome is a dict made only
of tensors, numbers, strings, lists and dicts, so a parent process can load it with
``torch.load(..., weights_only=True)`` without unpickling any object of the
student's.
"""
from __future__ import annotations

import contextlib
import copy
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# A returned value of any other type is recorded as unsupported (by its type name):
# the parent never sees, and so never trusts, a student's own objects.
_SCALARS = (bool, int, float, str, type(None))


def to_plain(value: Any, depth: int = 0) -> Any:
    """Turn a returned value into plain data (tensors, scalars, lists, dicts)."""
    if depth > 6:
        return {"__unsupported__": "structure nested too deeply"}
    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            return {"__unsupported__": f"tensor subclass {type(value).__name__}"}
        return value.detach().clone().cpu()
    if type(value) in _SCALARS:
        return value
    # Tuples (with their subclasses: torch.Size, named tuples) and lists stay apart, so a
    # contract that says "a tuple" can accept torch.Size and refuse a list.
    if isinstance(value, tuple):
        return {"__seq__": [to_plain(v, depth + 1) for v in tuple.__iter__(value)]}
    if isinstance(value, list):
        return {"__list__": [to_plain(v, depth + 1) for v in list.__iter__(value)]}
    # Dicts and their subclasses (OrderedDict, defaultdict) alike: a dict is a dict.
    if isinstance(value, dict) and all(type(k) is str for k in dict.keys(value)):
        return {"__dict__": {k: to_plain(v, depth + 1) for k, v in dict.items(value)}}
    try:
        import numpy as np
        if type(value) is np.ndarray:
            return {"__unsupported__": "numpy.ndarray (return a torch.Tensor)"}
        if isinstance(value, np.generic):
            return value.item() if type(value.item()) in _SCALARS else {
                "__unsupported__": type(value).__name__}
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    return {"__unsupported__": type(value).__name__}


def _seed(seed: int) -> None:
    """Seed torch's global CPU generator, the one a call's random draws come from here.

    ``torch.manual_seed`` also queues a seed for every accelerator backend that is not yet
    initialised, recording a stack trace each time (about 0.8 ms a call, most of a check's time
    on small inputs); the course runs on the CPU, where the two give the same draws."""
    torch.random.default_generator.manual_seed(int(seed))


def _copy_arg(value: Any) -> Any:
    # Students may modify their inputs in place; each call gets its own copy.
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict) and MODULE_KEY in value:
        return _build_module(value)
    return copy.deepcopy(value)


# An argument that is one of the course's own layers travels as plain data: a dict with this key
# naming the class ("multihead.MultiHeadAttention", a runtime module of the course) and its
# "init_args", "init_kwargs", "state_dict" (loaded exactly) and "train" (the mode it is passed in).
MODULE_KEY = "__course_module__"


def _build_module(spec: dict) -> torch.nn.Module:
    import importlib
    path, _, name = spec[MODULE_KEY].rpartition(".")
    cls = getattr(importlib.import_module(f"{__package__.split('.')[0]}.{path}"), name)
    module = cls(*[_copy_arg(a) for a in spec.get("init_args", ())],
                 **{k: _copy_arg(v) for k, v in spec.get("init_kwargs", {}).items()})
    module.load_state_dict({k: v.clone() for k, v in spec["state_dict"].items()})
    return module.train(bool(spec.get("train", False)))


class _LargestTensor(TorchDispatchMode):
    """Records the largest tensor that any torch operation creates while it is active, in
    entries of the memory under it (its storage), so a view (a slice, ``expand``) counts as
    the tensor it looks into, and a tensor made by the backward pass of autograd counts too.
    Used by ``report=("largest_tensor",)``: a check can then tell whether an answer ever held
    a whole matrix it was asked to build tile by tile."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Otherwise torch wraps __torch_dispatch__ in torch._dynamo.disable, and the first use
        # imports torch._dynamo: 4-5 s, for a mode that never meets torch.compile.
        return False

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for item in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(item, torch.Tensor):
                entries = item.untyped_storage().nbytes() // max(item.element_size(), 1)
                self.largest = max(self.largest, entries)
        return out


class _KernelMemory:
    """What the Triton kernels launched during a call read and write, for ``report=("kernel_memory",)``.

    Active only where triton's interpreter runs the kernels (a CPU, ``TRITON_INTERPRET=1``): while
    the call runs, the interpreter's masked load and store (every ``tl.load``/``tl.store``, with or
    without a mask, and the tensor descriptors' loads, go through them) are wrapped so that

    * the kernel runs on copies of its tensors, each in the middle of a buffer with a guard zone on
      either side (copied back after the launch), and a lane outside every copy is never touched: a
      load there gives NaN (a float) and a store there is dropped, and both are counted, so a missing
      boundary mask has one outcome on every machine, whatever lies next to a tensor in memory, and
      never corrupts memory;
    * the largest single load (in lanes, masked or not) is kept: a kernel that loads all the keys
      at once, instead of a block of them, shows it;
    * the elements each program reads from each tensor argument of the call are kept (their offsets
      from the tensor's first element), so a check can tell which blocks a program visited.

    numpy's floating-point warnings (raised in the interpreter) are silenced while the kernels run.
    The outcome is plain data:
    ``{"launches", "largest_load", "out_of_bounds_loads", "out_of_bounds_stores",
    "reads": {"<launch>,<x>,<y>,<z>": {"<argument position>": offsets}}}``."""

    def __init__(self, tensors: dict):
        # argument position -> (its storage, its first element's offset in it in bytes, entry size)
        self.tracked = {pos: (t.untyped_storage().data_ptr(), t.storage_offset() * t.element_size(),
                              t.element_size()) for pos, t in tensors.items()}
        self.copies: dict = {}
        self.live: dict = {}
        self.launches, self.largest = 0, 0
        self.bad_loads = self.bad_stores = 0
        self.ranges: list = []
        self.reads: dict = {}
        self.undo: list = []

    def __enter__(self):
        import os
        import sys
        if "triton" not in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            return self             # no kernel has run or will run in the interpreter
        try:                        # only kernel exercises ask for this report; they need triton
            import triton.runtime.interpreter as interp
        except ImportError:
            return self
        import numpy as np
        builder, executor, recorder = interp.InterpreterBuilder, interp.GridExecutor, self
        load, store = builder.create_masked_load, builder.create_masked_store
        init, restore = executor._init_args_hst, executor._restore_args_dev

        def inside(ptrs):
            ok = np.zeros(ptrs.shape, dtype=bool)
            for lo, hi in recorder.ranges:
                ok |= (ptrs >= lo) & (ptrs < hi)
            return ok

        def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
            data = np.asarray(ptrs.data)
            on = np.broadcast_to(np.asarray(mask.data, dtype=bool), data.shape)
            ok = inside(data)
            recorder.largest = max(recorder.largest, int(data.size))
            bad = on & ~ok
            if bad.any():
                recorder.bad_loads += int(bad.sum())
                mask = interp.TensorHandle(on & ok, mask.dtype)
            out = load(self, ptrs, mask, other, cache_policy, is_volatile)
            if bad.any() and np.issubdtype(out.data.dtype, np.floating):
                out.data[np.broadcast_to(bad, out.data.shape)] = np.nan
            key = ",".join(str(i) for i in (recorder.launches, *(self.grid_idx or (0, 0, 0))))
            for pos, (lo, size, hi) in recorder.live.items():
                hit = on & ok & (data >= lo) & (data < hi)
                if hit.any():
                    recorder.reads.setdefault(key, {}).setdefault(str(pos), []).append(
                        ((data[hit] - lo) // size).astype(np.int64))
            return out

        def masked_store(self, ptrs, value, mask, cache_policy):
            data = np.asarray(ptrs.data)
            on = np.broadcast_to(np.asarray(mask.data, dtype=bool), data.shape)
            bad = on & ~inside(data)
            if bad.any():
                recorder.bad_stores += int(bad.sum())
                mask = interp.TensorHandle(on & ~bad, mask.dtype)
            return store(self, ptrs, value, mask, cache_policy)

        def init_args(self, args, kwargs):
            args_hst, kwargs_hst = init(self, args, kwargs)
            recorder.launches += 1
            flat = [t for arg in list(args_hst) + list(kwargs_hst.values())
                    for t in (arg if isinstance(arg, tuple) else (arg,))]
            tensors = [t for t in flat if isinstance(t, torch.Tensor)]
            plain = all(t.device.type == "cpu" for t in tensors) and not any(hasattr(t, "base") and not
                                                                             isinstance(t, torch.Tensor) for t in flat)
            recorder.copies, recorder.ranges, recorder.live = {}, [], {}
            if not plain:    # a tensor descriptor, or another device: the tensors' own ranges, unguarded
                for t in flat:
                    t = t if isinstance(t, torch.Tensor) else getattr(t, "base", None)
                    if isinstance(t, torch.Tensor):
                        lo = t.untyped_storage().data_ptr()
                        recorder.ranges.append((lo, lo + t.untyped_storage().nbytes()))
                        for pos, (start, offset, size) in recorder.tracked.items():
                            if start == lo:
                                recorder.live[pos] = (lo + offset, size, lo + t.untyped_storage().nbytes())
                return args_hst, kwargs_hst
            # Each storage the kernel receives is copied into the middle of a buffer with a guard zone on
            # either side, so a block that runs past one tensor never lands in the next one's memory.
            for t in tensors:
                storage = t.untyped_storage()
                if storage.data_ptr() not in recorder.copies:
                    guard = max(1 << 16, -(-storage.nbytes() // 128) * 128)
                    buffer = torch.zeros(2 * guard + storage.nbytes(), dtype=torch.uint8)
                    buffer[guard:guard + storage.nbytes()] = torch.empty(0, dtype=torch.uint8).set_(storage)
                    recorder.copies[storage.data_ptr()] = (storage, buffer, guard)
                    lo = buffer.data_ptr() + guard
                    recorder.ranges.append((lo, lo + storage.nbytes()))
                    for pos, (start, offset, size) in recorder.tracked.items():
                        if start == storage.data_ptr():
                            recorder.live[pos] = (lo + offset, size, lo + storage.nbytes())

            def moved(t):
                if isinstance(t, tuple):
                    return tuple(moved(x) for x in t)
                if not isinstance(t, torch.Tensor):
                    return t
                _, buffer, guard = recorder.copies[t.untyped_storage().data_ptr()]
                return torch.empty(0, dtype=t.dtype).set_(buffer.untyped_storage(), (guard + t.storage_offset() *
                                                          t.element_size()) // t.element_size(), t.size(), t.stride())
            return [moved(a) for a in args_hst], {k: moved(v) for k, v in kwargs_hst.items()}

        def restore_args(self, args_dev, args_hst, kwargs, kwargs_hst):
            if not recorder.copies:
                return restore(self, args_dev, args_hst, kwargs, kwargs_hst)
            for storage, buffer, guard in recorder.copies.values():   # the kernel's writes, back in place
                torch.empty(0, dtype=torch.uint8).set_(storage).copy_(buffer[guard:guard + storage.nbytes()])

        builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
        executor._init_args_hst, executor._restore_args_dev = init_args, restore_args
        self.undo = [(builder, "create_masked_load", load), (builder, "create_masked_store", store),
                     (executor, "_init_args_hst", init), (executor, "_restore_args_dev", restore)]
        # The interpreter computes every lane, masked ones too (0/0 where a mask later picks 0): numpy's
        # warnings about them say nothing of the kernel a GPU would run.
        import warnings
        self.quiet = [np.errstate(all="ignore"), warnings.catch_warnings()]
        for context in self.quiet:
            context.__enter__()
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
        return self

    def __exit__(self, *exc):
        for owner, name, original in self.undo:
            setattr(owner, name, original)
        for context in reversed(self.quiet if self.undo else []):
            context.__exit__(*exc)
        return False

    def outcome(self) -> dict:
        import numpy as np
        reads = {key: {pos: torch.from_numpy(np.unique(np.concatenate(parts))) for pos, parts in by_arg.items()}
                 for key, by_arg in self.reads.items()}
        return {"launches": self.launches, "largest_load": self.largest, "out_of_bounds_loads": self.bad_loads,
                "out_of_bounds_stores": self.bad_stores, "reads": reads}


# report=("inputs_unchanged",): the tensor arguments the call changed in place, under this extras key,
# each as [its position (a keyword argument: its keyword), its name in the answer's own signature
# ("argument N" where it has none)]: positions are compared, names are shown.
WRITTEN_IN_PLACE = "arguments_written_in_place"
# The hint of a check that such a change fails when no kept mistake explains it (the check's own hint speaks of values).
IN_PLACE_HINT = ("an argument was changed where it stands (the reason names it; an indexed write, *= or an in-place "
                 "method does that): work on a copy or on new tensors, so that the caller's arguments stay as given.")


def _watch_inputs(target: Any, args: list, kwargs: dict) -> list:
    """``[(slot, name, tensor given, a copy of it)]`` for every tensor argument of a call, before it runs."""
    import inspect
    try:
        names = list(inspect.signature(target).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        names = []
    positional = [names[i] if i < len(names) else f"argument {i + 1}" for i in range(len(args))]
    slots = list(zip(range(len(args)), positional, args)) + [(k, k, v) for k, v in kwargs.items()]
    return [(slot, name, value, value.detach().clone()) for slot, name, value in slots
            if isinstance(value, torch.Tensor)]


def _changed(given: torch.Tensor, kept: torch.Tensor) -> bool:
    """Whether a tensor argument differs from the copy taken before the call (shape, dtype or an
    entry; NaN equals NaN)."""
    given = given.detach()
    if given.dtype != kept.dtype or given.shape != kept.shape:
        return True
    same = given == kept
    if given.is_floating_point() or given.is_complex():
        same |= torch.isnan(given) & torch.isnan(kept)
    return not bool(same.all())


def run_call(obj: Any, call, kind: str = "function") -> dict:
    """Execute ``call`` on ``obj`` and return its outcome as plain data."""
    try:
        args = [_copy_arg(a) for a in call.args]
        kwargs = {k: _copy_arg(v) for k, v in call.kwargs.items()}
        for i in call.grads_of:
            args[i] = args[i].detach().clone().requires_grad_(True)
        target = obj
        instance = None
        if call.init_args is not None:
            if not isinstance(obj, type):
                return _raised(TypeError(
                    f"expected a class, got {type(obj).__name__}"), note="wrong kind")
            if call.init_seed is not None:
                _seed(call.init_seed)
            instance = obj(*[_copy_arg(a) for a in call.init_args],
                           **{k: _copy_arg(v) for k, v in call.init_kwargs.items()})
            if call.state_dict is not None:
                state = {k: v.clone() for k, v in call.state_dict.items()}
                if not call.strict_state:
                    parameters = {name for name, _ in instance.named_parameters()}
                    for name, value in instance.state_dict().items():
                        if name not in state and name not in parameters:
                            state[name] = value      # the answer's own persistent buffer
                instance.load_state_dict(state)
            if call.train is not None:
                instance.train(call.train)
            target = getattr(instance, call.method) if call.method else instance
        elif not callable(obj):
            return _raised(TypeError(
                f"expected a function, got {type(obj).__name__}"), note="wrong kind")
        if call.call_seed is not None:
            _seed(call.call_seed)
        watched = _watch_inputs(target, args, kwargs) if "inputs_unchanged" in call.report else None
        recorder = _LargestTensor() if "largest_tensor" in call.report else None
        memory = _KernelMemory({i: a for i, a in enumerate(args) if isinstance(a, torch.Tensor)}) \
            if "kernel_memory" in call.report else None
        with (recorder or contextlib.nullcontext()), (memory or contextlib.nullcontext()):
            result = target(*args, **kwargs)
        outcome = {"status": "ok", "value": to_plain(result)}
        if call.grads_of:
            out = result[0] if isinstance(result, (tuple, list)) else result
            if not isinstance(out, torch.Tensor) or not out.requires_grad:
                outcome["grads"] = {"__unsupported__": "output does not depend on the inputs"}
            else:
                grads = torch.autograd.grad(out.sum(), [args[i] for i in call.grads_of],
                                            allow_unused=True)
                outcome["grads"] = {"__seq__": [
                    torch.zeros_like(args[i]) if g is None else g.detach().clone()
                    for i, g in zip(call.grads_of, grads)]}
        extras = {}
        if "param_shapes" in call.report and instance is not None:
            extras["param_shapes"] = {n: list(p.shape) for n, p in instance.named_parameters()}
        if "buffer_names" in call.report and instance is not None:
            extras["buffer_names"] = sorted(n for n, _ in instance.named_buffers())
        if "module_args_training" in call.report:   # the mode each layer argument is left in
            extras["training_flags_of_the_layer_arguments_after_the_call"] = [
                bool(a.training) for a in args if isinstance(a, torch.nn.Module)]
        if watched is not None:
            extras[WRITTEN_IN_PLACE] = [[slot, name] for slot, name, given, kept in watched if _changed(given, kept)]
        if recorder is not None:
            extras["largest_tensor_entries"] = recorder.largest
        if memory is not None:
            extras["kernel_memory"] = memory.outcome()
        if extras:
            outcome["extras"] = extras
        return outcome
    except (Exception, SystemExit) as error:  # a student's bug must never stop the checks
        return _raised(error)


def _raised(error: BaseException, note: str = "") -> dict:
    return {
        "status": "raised",
        "error_type": type(error).__name__,
        "error_mro": [t.__name__ for t in type(error).__mro__],
        "message": str(error)[:2000],
        "note": note,
    }


def kernels_compiled(exercise) -> str:
    """Why a kernel exercise cannot be checked in this session, or "": its checks record every load of
    the kernel (``report=("kernel_memory",)``), which only Triton's interpreter can, on CPU tensors."""
    import os
    import sys
    if "triton" not in sys.modules or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return ""
    import torch
    if not torch.cuda.is_available() or not exercise.checks:
        return ""
    first = exercise.checks[0]
    if not any("kernel_memory" in call.report for call in first.make_calls(first.seed)):
        return ""
    return ("this session compiles Triton kernels for its GPU, and the checks of a kernel exercise run your "
            "kernel in Triton's interpreter, which records every load and store (on CPU tensors). Restart the "
            "notebook's kernel with `%env TRITON_INTERPRET=1` as its first cell to check your answers "
            "(bench/kernels.py times the compiled kernels). Nothing of your work was run.")
