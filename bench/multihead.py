#!/usr/bin/env python3
"""Time and memory of three multi-head attention layers that compute the same function.

    .venv/bin/python bench/multihead.py            # print the table and the target lines
    .venv/bin/python bench/multihead.py --save     # also write bench/multihead_results.csv
    .venv/bin/python bench/multihead.py --quick    # two small sizes only (a smoke test)
    .venv/bin/python bench/multihead.py --sdpa-memory [--save]
                          # only the memory of F.scaled_dot_product_attention's arguments,
                          # written to bench/multihead_sdpa_memory.csv with --save

The layers (all from :mod:`attention_course.multihead`, d_model = 768, 12 heads of 64,
causal, dropout 0, loaded with the same weights and checked to agree before timing):

* ``wrapper``   -- 12 single-head modules run one after the other, outputs concatenated,
  then the output projection;
* ``efficient`` -- one projection each for queries, keys and values, reshaped to
  (batch, heads, tokens, head_dim), scores / mask / softmax / weighted values written
  out by hand as batched matmuls, then the output projection;
* ``sdpa``      -- the same layer with its core replaced by
  ``torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)``.

Sizes: batch 1 with 32, 64, 128, 256, 512 and 1024 tokens (the sequence-length sweep
that the chapter plots on log-log axes), and batch 8 with 64 tokens.

**Time.** ``torch.set_num_threads(2)``. "forward" is inference: eval mode under
``torch.no_grad()``. "fwd+bwd" is one training step's worth of work: a forward pass with
autograd, then ``out.sum().backward()`` (parameter gradients reset to None between runs,
outside the timed region). Every layer gets 2 untimed warm-up runs, then the runs of the
three layers are *interleaved* (wrapper, efficient, sdpa, wrapper, ...), so that a burst
of load from other processes hits all three alike, and the whole sweep over the sizes is
done twice (``--rounds``), so that one busy moment does not decide a size's figures. The
table reports the **fastest** run in milliseconds (30 runs per layer and mode for small
inputs, down to 10 for 1024 tokens): on a shared machine other processes can only ever
make a run slower, so the minimum is the most repeatable estimate of what the layer
itself costs. The CSV keeps the median too, and records the load average of the run.

**Peak memory.** CPU tensors have no ``torch.cuda.max_memory_allocated``, so we ask
PyTorch's CPU allocator: one extra, untimed run of the step under
``torch.profiler.profile(profile_memory=True)`` records every allocation and every free
made through the allocator (tensors, autograd's saved tensors, the parameter gradients,
and the scratch buffers that kernels such as ``scaled_dot_product_attention`` allocate),
in order. Their running sum is the number of bytes alive at each moment, and its maximum,
counted from the state before the step (weights and input already allocated), is the
**peak MB** of the table. It is exact and repeatable, unlike the resident set size
(which depends on how malloc reuses freed pages); it does not count the Python objects
or memory that a library allocates behind PyTorch's back (e.g. oneDNN's small per-thread
workspaces), which are tiny here.

The script prints PASS/FAIL lines for the chapter's targets and never asserts: timings
depend on the machine and on whatever else runs on it.

**Which arguments keep the fused kernel's memory saving (``--sdpa-memory``).** On CPU,
``F.scaled_dot_product_attention`` chooses between a fused flash-attention kernel and the
"math" fallback, which is the naive computation written in ATen. The choice depends on
the arguments, so this mode measures the peak memory (same profiler count as above, no
timing) of

* one head of 64 features at 4096 tokens (batch 1), queries, keys and values given;
  "forward" under ``torch.no_grad()``, "fwd+bwd" with gradients of all three. Variants:
  ``naive`` (scores, causal ``masked_fill``, softmax, weighted values, by hand),
  ``is_causal`` (``is_causal=True``), ``bool_mask`` (a causal boolean ``attn_mask``,
  ``True`` = may attend), ``float_mask`` (an additive float ``attn_mask``, 0 or -inf),
  ``dropout`` (``is_causal=True, dropout_p=0.1``) and ``math_forced`` (``is_causal=True``
  inside ``torch.nn.attention.sdpa_kernel(SDPBackend.MATH)``). A mask is built before the
  step, so it is not counted in ``peak_mb``; its own size is the ``mask_mb`` column;
* the chapter's layers at 1024 tokens (d_model 768, 12 heads), one training step
  (fwd+bwd), with dropout 0 and 0.1: ``efficient`` (hand-written core) and ``sdpa``.

The ``backend`` column is what ``torch._fused_sdp_choice`` (a private function that
``F.scaled_dot_product_attention`` consults) returns for these arguments: ``flash`` or
``math``. The small figures of the fused kernel grow with the thread count (it keeps
per-thread buffers); the large ones do not.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import statistics
import sys
import time

import torch

from _common import ROOT, cpu_name, measured_by, write_csv  # bench/_common.py; puts the repository root on sys.path
from attention_course import multihead as mh
from attention_course.efficient import peak_memory  # the profiler's allocator count

D_MODEL, NUM_HEADS, THREADS = 768, 12, 2
CONTEXT = 1024
SIZES = [(1, 32), (1, 64), (1, 128), (1, 256), (1, 512), (1, 1024), (8, 64)]
QUICK_SIZES = [(1, 32), (8, 64)]
VARIANTS = ["wrapper", "efficient", "sdpa"]
CSV_PATH = ROOT / "bench" / "multihead_results.csv"
SDPA_CSV_PATH = ROOT / "bench" / "multihead_sdpa_memory.csv"
HEAD_TOKENS, HEAD_DIM, LAYER_TOKENS, DROPOUT = 4096, 64, 1024, 0.1


def build(variant: str, seed: int = 0):
    """The three layers with identical weights (the wrapper's, mapped into the others)."""
    torch.manual_seed(seed)
    wrapper = mh.MultiHeadAttentionWrapper(D_MODEL, D_MODEL, CONTEXT, 0.0, NUM_HEADS)
    if variant == "wrapper":
        return wrapper
    cls = mh.MultiHeadAttention if variant == "efficient" else mh.SDPAMultiHeadAttention
    return mh.copy_wrapper_weights(wrapper, cls(D_MODEL, D_MODEL, CONTEXT, 0.0, NUM_HEADS))


def make_input(batch: int, tokens: int) -> torch.Tensor:
    return torch.randn(batch, tokens, D_MODEL, generator=torch.Generator().manual_seed(1))


def run_forward(layer, x):
    layer.eval()
    with torch.no_grad():
        return layer(x)


def run_fwd_bwd(layer, x):
    layer.train()
    out = layer(x)
    out.sum().backward()
    return out


def repeats_for(batch: int, tokens: int) -> int:
    """Timed runs per layer and mode in one round (fewer for the slow, large inputs)."""
    if tokens >= 1024:
        return 5
    if tokens >= 512:
        return 6
    if tokens >= 256:
        return 8
    return 15 if batch * tokens <= 128 else 10


def time_size(batch: int, tokens: int) -> dict:
    """{(variant, mode): [ms of every timed run]}, runs interleaved across the variants."""
    layers = {v: build(v) for v in VARIANTS}
    x = make_input(batch, tokens)
    # Same function first: a benchmark of layers that disagree would be meaningless.
    with torch.no_grad():
        ref = layers["wrapper"](x)
        for v in VARIANTS[1:]:
            torch.testing.assert_close(layers[v](x), ref, rtol=1e-4, atol=1e-4)
    reps = repeats_for(batch, tokens)
    out = {}
    for mode, fn in (("forward", run_forward), ("fwd+bwd", run_fwd_bwd)):
        samples = {v: [] for v in VARIANTS}
        for v in VARIANTS:            # warm-up
            for _ in range(2):
                layers[v].zero_grad(set_to_none=True)
                fn(layers[v], x)
        for _ in range(reps):
            for v in VARIANTS:
                layers[v].zero_grad(set_to_none=True)
                start = time.perf_counter()
                fn(layers[v], x)
                samples[v].append((time.perf_counter() - start) * 1e3)
        for v in VARIANTS:
            out[(v, mode)] = samples[v]
    return out


def peak_mb(fn) -> float:
    """Largest number of MB alive (allocated by PyTorch, counted from the start) during fn()."""
    return peak_memory(fn)[1] / 2**20


def measure_memory(variant: str, batch: int, tokens: int) -> dict:
    layer = build(variant)
    x = make_input(batch, tokens)
    run_fwd_bwd(layer, x)               # warm-up, then start from no gradients
    layer.zero_grad(set_to_none=True)
    out = {"forward": peak_mb(lambda: run_forward(layer, x)),
           "fwd+bwd": peak_mb(lambda: run_fwd_bwd(layer, x))}
    return out


def backend_name(q, k, v, **kwargs) -> str:
    """The backend SDPA picks for these arguments (from a private function; "unknown" if it moved)."""
    from torch.nn.attention import SDPBackend
    try:
        choice = int(torch._fused_sdp_choice(q, k, v, **kwargs))
    except (AttributeError, RuntimeError, TypeError):
        return "unknown"
    names = {int(SDPBackend.MATH.value): "math", int(SDPBackend.FLASH_ATTENTION.value): "flash",
             int(SDPBackend.EFFICIENT_ATTENTION.value): "efficient"}
    return names.get(choice, str(choice))


def sdpa_argument_memory() -> list:
    """Rows of the --sdpa-memory table (see the module docstring)."""
    import math
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    n, d = HEAD_TOKENS, HEAD_DIM
    g = torch.Generator().manual_seed(0)
    base = [torch.randn(1, 1, n, d, generator=g) for _ in range(3)]
    allowed = torch.ones(n, n, dtype=torch.bool).tril()              # SDPA's convention: True = may attend
    additive = torch.zeros(n, n).masked_fill(~allowed, -math.inf)

    def naive(q, k, v):
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(~allowed, -math.inf)
        return scores.softmax(dim=-1) @ v

    def math_forced(q, k, v):
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    # name -> (function, SDPA's keyword arguments or None, size of the mask built beforehand)
    variants = {
        "naive": (naive, None, allowed),
        "is_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                      {"is_causal": True}, None),
        "bool_mask": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=allowed),
                      {"attn_mask": allowed}, allowed),
        "float_mask": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
                       {"attn_mask": additive}, additive),
        "dropout": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=DROPOUT),
                    {"is_causal": True, "dropout_p": DROPOUT}, None),
        "math_forced": (math_forced, None, None),
    }
    rows = []
    for name, (fn, kwargs, mask) in variants.items():
        def forward():
            with torch.no_grad():
                return fn(*base)

        def fwd_bwd():
            q, k, v = (t.clone().requires_grad_() for t in base)
            fn(q, k, v).sum().backward()

        forward(), fwd_bwd()            # warm-up: one-off allocations stay out of the count
        if kwargs is None:
            backend = "math" if name == "math_forced" else "none"
        else:
            backend = backend_name(*base, **kwargs)
        mask_mb = 0.0 if mask is None else mask.numel() * mask.element_size() / 2**20
        for mode, step in (("forward", forward), ("fwd+bwd", fwd_bwd)):
            rows.append({"setting": f"one head, {n} tokens", "variant": name, "backend": backend,
                         "mode": mode, "peak_mb": f"{peak_mb(step):.2f}", "mask_mb": f"{mask_mb:.2f}"})
            print(rows[-1], flush=True)

    x = make_input(1, LAYER_TOKENS)
    for variant in ("efficient", "sdpa"):
        for p in (0.0, DROPOUT):
            layer = build(variant)
            layer.dropout.p = p
            run_fwd_bwd(layer, x)
            layer.zero_grad(set_to_none=True)
            if variant == "sdpa":
                heads = torch.randn(1, NUM_HEADS, LAYER_TOKENS, D_MODEL // NUM_HEADS)
                backend = backend_name(heads, heads, heads, is_causal=True, dropout_p=p)
            else:
                backend = "none"
            rows.append({"setting": f"layer, {LAYER_TOKENS} tokens", "variant": f"{variant}, dropout {p:g}",
                         "backend": backend, "mode": "fwd+bwd",
                         "peak_mb": f"{peak_mb(lambda: run_fwd_bwd(layer, x)):.2f}", "mask_mb": "0.00"})
            print(rows[-1], flush=True)
    return rows


def fmt_ratio(a: float, b: float) -> str:
    return f"{a / b:6.2f}x" if b > 0 else "    n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--save", action="store_true", help=f"write {CSV_PATH.relative_to(ROOT)}")
    parser.add_argument("--quick", action="store_true", help="only batch 1 x 32 and batch 8 x 64")
    parser.add_argument("--rounds", type=int, default=2, help="timing sweeps over all sizes (default 2)")
    parser.add_argument("--sdpa-memory", action="store_true",
                        help="only the peak memory of F.scaled_dot_product_attention's arguments")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    if args.sdpa_memory:
        rows = sdpa_argument_memory()
        if args.save:
            write_csv(SDPA_CSV_PATH, rows, comments=[
                measured_by("multihead.py --sdpa-memory", THREADS),
                f"peak_mb = most MB alive at once in the CPU allocator during the step (torch.profiler); "
                f"mask_mb = size of the mask, built before the step and not counted in peak_mb; "
                f"backend = what SDPA picks for these arguments (torch._fused_sdp_choice)"])
            print(f"wrote {SDPA_CSV_PATH.relative_to(ROOT)}")
        return 0
    load_before = os.getloadavg()[0]
    sizes = QUICK_SIZES if args.quick else SIZES
    date = _dt.date.today().isoformat()
    print(f"multi-head attention, d_model={D_MODEL}, {NUM_HEADS} heads, causal; torch {torch.__version__}, "
          f"{THREADS} threads of {os.cpu_count()} cores ({cpu_name()}); {date}")
    print("times: fastest of N runs in ms (runs interleaved); peak MB: most bytes alive at once in PyTorch's CPU allocator (profiler)\n")
    rows = []
    header = (f"{'batch x tokens':>14s} {'layer':>9s} | {'fwd ms':>9s} {'vs wrap':>8s} {'peak MB':>8s} | "
              f"{'fwd+bwd ms':>10s} {'vs wrap':>8s} {'peak MB':>8s} | {'mem vs efficient (fwd, fwd+bwd)':>31s}")
    results = {}
    # Every size is timed in each of `rounds` sweeps, so that a burst of load from other
    # processes during one sweep does not decide a size's figures.
    samples = {}
    for round_index in range(args.rounds):
        print(f"(timing sweep {round_index + 1} of {args.rounds})", flush=True)
        for batch, tokens in sizes:
            for key, values in time_size(batch, tokens).items():
                samples.setdefault((batch, tokens) + key, []).extend(values)
    print()
    print(header)
    print("-" * len(header))
    for batch, tokens in sizes:
        mems = {v: measure_memory(v, batch, tokens) for v in VARIANTS}
        for v in VARIANTS:
            for mode in ("forward", "fwd+bwd"):
                runs = samples[(batch, tokens, v, mode)]
                ms, median, reps = min(runs), statistics.median(runs), len(runs)
                results[(batch, tokens, v, mode)] = (ms, mems[v][mode])
                rows.append({"batch": batch, "tokens": tokens, "variant": v, "mode": mode,
                             "ms": f"{ms:.3f}", "ms_median": f"{median:.3f}",
                             "peak_mb": f"{mems[v][mode]:.2f}", "runs": reps})
        for v in VARIANTS:
            f_ms, f_mb = results[(batch, tokens, v, "forward")]
            b_ms, b_mb = results[(batch, tokens, v, "fwd+bwd")]
            wf = results[(batch, tokens, "wrapper", "forward")][0]
            wb = results[(batch, tokens, "wrapper", "fwd+bwd")][0]
            ef_mb = results[(batch, tokens, "efficient", "forward")][1]
            eb_mb = results[(batch, tokens, "efficient", "fwd+bwd")][1]
            mem = f"{fmt_ratio(f_mb, ef_mb)} {fmt_ratio(b_mb, eb_mb)}"
            print(f"{batch:>6d} x {tokens:<5d} {v:>9s} | {f_ms:9.2f} {wf / f_ms:7.2f}x {f_mb:8.1f} | "
                  f"{b_ms:10.2f} {wb / b_ms:7.2f}x {b_mb:8.1f} | {mem:>31s}")
        print()

    print("targets (reported, not asserted):")
    lines = []
    if (1, 32, "wrapper", "forward") in results:
        for mode in ("forward", "fwd+bwd"):
            speed = results[(1, 32, "wrapper", mode)][0] / results[(1, 32, "efficient", mode)][0]
            lines.append((speed >= 3.0, f"efficient >= 3x faster than the wrapper at batch 1 x 32 tokens "
                                        f"({mode}): {speed:.2f}x"))
    if (1, 1024, "wrapper", "forward") in results:
        for mode in ("forward", "fwd+bwd"):
            speed = results[(1, 1024, "wrapper", mode)][0] / results[(1, 1024, "sdpa", mode)][0]
            mem = results[(1, 1024, "sdpa", mode)][1] / max(results[(1, 1024, "efficient", mode)][1], 1e-9)
            lines.append((speed >= 2.0, f"sdpa >= 2x faster than the wrapper at 1024 tokens ({mode}): {speed:.2f}x"))
            lines.append((mem <= 0.25, f"sdpa peak memory <= 1/4 of the hand-written layer's at 1024 tokens "
                                       f"({mode}): {mem:.3f}"))
    for ok, text in lines:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}")
    if not lines:
        print("  (the target sizes were not run)")

    load = max(load_before, os.getloadavg()[0])
    busy = load > 0.5 * (os.cpu_count() or 1)
    load_note = (f"1-minute load average up to {load:.1f} on {os.cpu_count()} cores"
                 + (": other processes competed for the CPU, so compare the fastest runs (ms), "
                    "not the medians" if busy else ""))
    print(f"\n{load_note}")
    if args.save:
        write_csv(CSV_PATH, rows, comments=[
            measured_by("multihead.py", THREADS, date),
            "d_model 768, 12 heads, causal, dropout 0; ms = fastest of `runs` runs, ms_median = their median; "
            "peak_mb = most MB alive at once in the CPU allocator during the step (torch.profiler)",
            load_note])
        print(f"\nwrote {CSV_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
