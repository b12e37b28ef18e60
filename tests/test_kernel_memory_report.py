"""The check engine's ``report=("kernel_memory",)`` (``checks/calls.py``): what the Triton kernels launched
during a call loaded and stored, recorded as plain data in the call layer (a grading child runs it too).
Chapter 11's checks use it to fail a kernel without its boundary masks (the same way on every run),
one that loads all the keys at once, and one that loads blocks it had to skip."""
import pytest
import torch

pytest.importorskip("attention_course.kernels")   # sets TRITON_INTERPRET (no GPU) before triton loads

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from attention_course.checks.calls import run_call  # noqa: E402
from attention_course.checks.registry import Call  # noqa: E402


@triton.jit
def _double(X, Y, n, B: tl.constexpr, MASK: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    if MASK:
        tl.store(Y + i, tl.load(X + i, mask=i < n, other=0.0) * 2, mask=i < n)
    else:
        tl.store(Y + i, tl.load(X + i) * 2)


def _launcher(mask, block=16):
    def double(x, neighbour):
        y = torch.zeros_like(x)
        _double[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), B=block, MASK=mask)
        return y, neighbour * 1
    return double


def _memory(outcome):
    assert outcome["status"] == "ok", outcome
    return outcome["extras"]["kernel_memory"]


def test_a_masked_kernel_reads_what_it_should_and_writes_back_its_output():
    x = torch.arange(20, dtype=torch.float32)
    out = run_call(_launcher(True), Call(args=(x, torch.ones(3)), report=("kernel_memory",)))
    mem = _memory(out)
    assert torch.equal(out["value"]["__seq__"][0], 2 * x)          # the kernel's stores reached y
    assert mem["launches"] == 1 and mem["largest_load"] == 16
    assert mem["out_of_bounds_loads"] == mem["out_of_bounds_stores"] == 0
    # Program 0 read elements 0..15 of argument 0, program 1 elements 16..19; argument 1 untouched.
    reads = {key: {pos: t.tolist() for pos, t in by.items()} for key, by in mem["reads"].items()}
    assert reads == {"1,0,0,0": {"0": list(range(16))}, "1,1,0,0": {"0": list(range(16, 20))}}


def test_a_missing_mask_reads_nan_and_its_stores_are_dropped_every_time():
    x = torch.arange(20, dtype=torch.float32)
    outcomes = [run_call(_launcher(False), Call(args=(x, torch.ones(3)), report=("kernel_memory",)))
                for _ in range(3)]
    for out in outcomes:
        mem = _memory(out)
        # 12 lanes of the second block lie past the 20 entries of x and of y, whatever follows them.
        assert mem["out_of_bounds_loads"] == 12 and mem["out_of_bounds_stores"] == 12
        y, neighbour = out["value"]["__seq__"]
        assert torch.equal(y, 2 * x) and torch.equal(neighbour, torch.ones(3))


def test_the_report_without_any_kernel_says_so():
    out = run_call(lambda x: x + 1, Call(args=(torch.ones(2),), report=("kernel_memory",)))
    assert _memory(out) == {"launches": 0, "largest_load": 0, "out_of_bounds_loads": 0,
                            "out_of_bounds_stores": 0, "reads": {}}


def test_a_session_that_compiles_kernels_is_told_to_check_in_the_interpreter(monkeypatch, capsys):
    """On a GPU machine, a notebook without TRITON_INTERPRET compiles its kernels, which cannot take the
    checks' CPU tensors nor record their loads: check() says so once and runs nothing (the
    answer would raise if called); exercises without kernels are checked as always."""
    from attention_course import check
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    calls = []

    def masked_row_softmax(x, valid_lens, block):
        calls.append(1)
        raise AssertionError("called")
    check("ch11_ex1", masked_row_softmax)
    out = capsys.readouterr().out
    assert not calls, out
    assert "0/" in out and "TRITON_INTERPRET=1" in out and "interpreter" in out, out

    def attention_pool(weights, values):
        return weights @ values
    check("ch01_ex1", attention_pool)
    out = capsys.readouterr().out
    assert "TRITON_INTERPRET" not in out and "\u2713" in out, out

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    check("ch11_ex1", masked_row_softmax)
    out = capsys.readouterr().out
    assert calls and "TRITON_INTERPRET=1 as" not in out, out
