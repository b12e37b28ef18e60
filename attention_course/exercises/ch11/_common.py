"""Helpers shared by the exercises of chapter 11 (one copy each).

* :func:`jit` -- a kernel of an exercise module is a plain function at module level (its module
  holds ``tl = None``); it becomes a Triton kernel on its first launch, so that importing the
  exercises (every chapter's tests, the registry) never needs triton, which only chapter 11's
  extra installs;
* :func:`kernel_compare` -- the compare of every kernel check: the memory the kernels touched
  (``report=("kernel_memory",)``, :class:`attention_course.checks.calls._KernelMemory`), the
  values, the largest single load, and which rows of the keys each program read.
"""
from __future__ import annotations

import os

import torch

from ...checks.registry import Check

_JITTED: dict = {}


def use_interpreter() -> None:
    """With no GPU, kernels run in triton's interpreter (chapter 11's rule): set before triton is
    imported and any kernel made, here when the exercises are imported (no triton is imported)."""
    if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


use_interpreter()


def load_triton():
    """triton, imported the way chapter 11 does: with no GPU, kernels run in triton's interpreter."""
    use_interpreter()
    try:
        import triton
    except ImportError as error:  # pragma: no cover - the suite installs the extra
        raise ImportError("chapter 11 needs the kernels extra: python3 -m pip install 'triton==3.9.0'") from error
    return triton


def jit(fn):
    """``fn`` as a Triton kernel (made once); its module's global ``tl`` is set to triton.language."""
    if fn not in _JITTED:
        triton = load_triton()
        import triton.language as language
        fn.__globals__["tl"] = language
        _JITTED[fn] = triton.jit(fn)
    return _JITTED[fn]


def blocks(n: int, block: int) -> int:
    """The number of blocks of ``block`` that cover ``n`` (the last one may be partial)."""
    return -(-n // block)


def _memory(outcome):
    return outcome.get("extras", {}).get("kernel_memory", {})


def rows_read(outcome, row_size: dict) -> dict:
    """``{query rows a program read: {argument: rows it read}}`` from a call's recorded reads,
    whatever the grid's order: a program is known by the rows of ``queries`` (argument 0) it read.
    ``row_size[argument]`` is the number of entries of one row (the head size)."""
    out: dict = {}
    for by_arg in _memory(outcome).get("reads", {}).values():
        q = by_arg.get("0")
        key = tuple(sorted(set((q // row_size[0]).tolist()))) if q is not None else ()
        entry = out.setdefault(key, {})
        for pos, size in row_size.items():
            if pos != 0 and str(pos) in by_arg:
                entry.setdefault(pos, set()).update((by_arg[str(pos)] // size).tolist())
    return out


def qkv_rows(call) -> dict:
    """Entries in one row of q, k and v (arguments 0, 1, 2): the head size, the last axis of q."""
    d = call.args[0].shape[-1]
    return {0: d, 1: d, 2: d}


def _ranges(rows) -> str:
    rows, spans = sorted(rows), []
    for r in rows:
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in spans) or "none"


def kernel_compare(budget, row_size=None, names=("queries", "keys", "values"), rtol=1e-4, atol=1e-4):
    """The compare of a kernel check. Per call, in this order:

    1. an expected outcome that raised fails the check (no kernel check expects an error: its kernels
       could not run, e.g. triton imported before ``TRITON_INTERPRET`` was set); an answer that raised
       is compared as usual (the stub's error, any other error);
    2. memory outside the tensors handed to the kernels: where the expected outcome touched none,
       any touch fails; where it did (a kept mistake), the answer matches it by touching some too;
    3. the values (within ``rtol`` and ``atol``);
    4. the largest single load against ``budget(call)`` lanes: over it where the expected outcome is
       not fails; where the expected outcome is over it too (a kept mistake), that is a match;
    5. with ``row_size(call)`` (argument position -> entries in one row), the rows of each argument
       that each program read, the program known by the rows of argument 0 it read: each block of them
       must be read by a program, and each such program must read the reference's rows of the others
       (a program that reads no row of argument 0, a merge for instance, is not compared)."""
    from ...checks.checking import compare_outcome
    values = Check("values", lambda seed: [], hint="", rtol=rtol, atol=atol)

    # Attention kernels count rows over the flattened (heads x tokens) axis; a row kernel has one per program.
    counted = " (rows counted over the flattened (heads x tokens) axis)" if len(names) > 1 else ""
    unit = "block of them" if len(names) > 1 else "row"

    def compare(got, want, calls):
        for i, (mine, theirs, call) in enumerate(zip(got, want, calls)):
            where = "" if len(calls) == 1 else f"call {i + 1} of {len(calls)}: "
            if theirs["status"] != "ok":   # no kernel check expects an error: the kernels could not run
                return (where + f"the expected outcome raised {theirs['error_type']}: {theirs['message'][:200]} "
                        "(Triton runs kernels on the CPU only in its interpreter: TRITON_INTERPRET=1 must be set "
                        "before triton is imported)")
            if mine["status"] != "ok":
                reason = compare_outcome(mine, theirs, values, call)
                if reason:
                    return where + reason
                continue
            m_mem, t_mem = _memory(mine), _memory(theirs)
            outside = m_mem.get("out_of_bounds_loads", 0) + m_mem.get("out_of_bounds_stores", 0)
            if t_mem.get("out_of_bounds_loads", 0) + t_mem.get("out_of_bounds_stores", 0):
                if outside:
                    continue
                return where + "the kernel stays inside its tensors where the other touches memory past them"
            if outside:
                return (where + f"the kernel loaded {m_mem['out_of_bounds_loads']} and stored "
                        f"{m_mem['out_of_bounds_stores']} elements outside the tensors it was given (those "
                        "loads gave NaN and those stores were dropped)")
            reason = compare_outcome({"status": "ok", "value": mine["value"]},
                                     {"status": "ok", "value": theirs["value"]}, values, call)
            if reason:
                return where + reason
            limit = budget(call)
            if t_mem.get("largest_load", 0) > limit:
                if m_mem.get("largest_load", 0) > limit:
                    continue
                return where + "the kernel loads blocks where the other loads more at once"
            if m_mem.get("launches", 0) == 0:
                return where + "no Triton kernel was launched during the call"
            if m_mem.get("largest_load", 0) > limit:
                return (where + f"one load of the kernel covers {m_mem['largest_load']} elements; a block "
                        f"covers at most {limit} here")
            if row_size is None:
                continue
            sizes = row_size(call)
            m_rows, t_rows = rows_read(mine, sizes), rows_read(theirs, sizes)
            for q_rows in sorted(r for r in t_rows if r):    # programs that read no row of argument 0: free
                if q_rows not in m_rows:
                    return (where + f"no program read exactly rows {_ranges(q_rows)} of {names[0]}{counted}: one "
                            f"program per {unit} is expected, reading {names[0]} where it is")
                for pos in sorted(t_rows[q_rows]):
                    expected = t_rows[q_rows][pos]
                    found = m_rows[q_rows].get(pos, set())
                    if found != expected:
                        return (where + f"the program that read rows {_ranges(q_rows)} of {names[0]} read rows "
                                f"{_ranges(found)} of {names[pos]}; expected rows {_ranges(expected)}{counted}")
        return None
    return compare


def rows_by_program(outcome, pos: int, size: int) -> dict:
    """``{program: rows of argument pos it read}`` from a call's recorded reads, each program known by
    the key of its record (``"<launch>,<x>,<y>,<z>"``: a launch and a grid position), for kernels whose
    programs :func:`rows_read` cannot tell apart (in decoding every program of a head reads the same
    query row). ``size`` is the number of entries of one row; programs that read no entry of the
    argument are left out."""
    out: dict = {}
    for key, by_arg in _memory(outcome).get("reads", {}).items():
        if str(pos) in by_arg:
            out[key] = set((by_arg[str(pos)] // size).tolist())
    return out


def launches(outcome) -> int:
    """The number of Triton kernels a call launched (0 where none ran)."""
    return _memory(outcome).get("launches", 0)
