#!/usr/bin/env python3
"""Chapter 11's measurement: the compiled FlashAttention kernels of ``attention_course.kernels``
against ``F.scaled_dot_product_attention`` on a CUDA GPU.

    .venv/bin/python bench/kernels.py                 # on a GPU: time, print, write bench/kernels_gpu.csv
    .venv/bin/python bench/kernels.py --out FILE.csv  # write elsewhere
    .venv/bin/python bench/kernels.py --quick         # two lengths (a smoke test)

**Without a CUDA GPU it times nothing and writes nothing** (exit 0). Triton's interpreter runs the
kernels there, program after program, each block operation in numpy: its times follow Python's
overhead per block operation, not what a GPU does, so they measure nothing about speed.

**On a GPU**, for each length ``n`` in :data:`LENGTHS` (batch ``BATCH``, ``HEADS`` heads of ``HEAD_DIM``,
float16 and, with ``--float32``, float32), causal and not:

* ``forward_ms``: ``kernels.flash_forward`` (blocks ``BLOCK_M`` x ``BLOCK_N``), and ``sdpa_forward_ms``:
  ``F.scaled_dot_product_attention`` with the backends PyTorch picks, each the median of
  ``triton.testing.do_bench`` (warm-up and repetitions in milliseconds of GPU time, after compiling);
* ``train_ms`` / ``sdpa_train_ms``: forward plus backward through ``kernels.flash_attention`` and
  through SDPA, for the gradient of ``(out * grad).sum()``;
* ``max_abs_diff`` / ``max_grad_diff``: the largest difference of the outputs and of dQ, dK, dV from SDPA's,
  and a difference beyond :func:`_tolerances` stops the run before anything is written, so that a
  time is never reported for a wrong answer.

The CSV starts with a ``# measured by`` line naming the GPU, torch and triton. The chapter quotes GPU
numbers only from that file (``tests/test_kernels_bench.py``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
from pathlib import Path

from _common import ROOT, write_csv  # first: puts the repository root on sys.path

MESSAGE_NO_GPU = ("no CUDA GPU: Triton's interpreter would run the kernels, and interpreter times measure "
                  "nothing about speed (they follow Python's overhead per block operation), so nothing is "
                  "timed and no CSV is written")
LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
BATCH, HEADS, HEAD_DIM = 4, 16, 64
BLOCK_M, BLOCK_N = 64, 64
CSV = ROOT / "bench" / "kernels_gpu.csv"


def _tolerances():
    import torch

    # largest difference from SDPA allowed before anything is timed (gradients: 8 times as much)
    return {torch.float16: 1e-2, torch.float32: 1e-4}


def _time(fn):
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def measure(lengths, dtypes):
    import torch
    import torch.nn.functional as F

    from attention_course import kernels

    rows = []
    gpu = torch.cuda.get_device_name()
    tolerances = _tolerances()
    for dtype in dtypes:
        for causal in (False, True):
            for n in lengths:
                g = torch.Generator(device="cuda").manual_seed(n)
                q, k, v, grad = (torch.randn(BATCH, HEADS, n, HEAD_DIM, generator=g, device="cuda", dtype=dtype)
                                 for _ in range(4))
                out, _ = kernels.flash_forward(q, k, v, causal=causal, block_m=BLOCK_M, block_n=BLOCK_N)
                want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                diff = (out.float() - want.float()).abs().max().item()

                leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                ours = torch.autograd.grad((kernels.flash_attention(*leaves, causal, BLOCK_M, BLOCK_N) * grad).sum(),
                                           leaves)
                theirs = torch.autograd.grad((F.scaled_dot_product_attention(*leaves, is_causal=causal) * grad).sum(),
                                             leaves)
                grad_diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(ours, theirs))
                tolerance = tolerances[dtype]
                if not (diff <= tolerance and grad_diff <= 8 * tolerance):
                    raise SystemExit(f"{dtype}, causal={causal}, {n} tokens: the kernels differ from SDPA by {diff:.3g} "
                                     f"(outputs) and {grad_diff:.3g} (gradients), beyond {tolerance:g} and "
                                     f"{8 * tolerance:g}: nothing is timed or written")

                def train(fn):
                    return lambda: torch.autograd.grad((fn() * grad).sum(), leaves)

                row = {
                    "gpu": gpu, "dtype": str(dtype).replace("torch.", ""), "causal": causal, "tokens": n,
                    "batch": BATCH, "heads": HEADS, "head_dim": HEAD_DIM, "block_m": BLOCK_M, "block_n": BLOCK_N,
                    "forward_ms": _time(lambda: kernels.flash_forward(q, k, v, causal=causal, block_m=BLOCK_M,
                                                                      block_n=BLOCK_N)),
                    "sdpa_forward_ms": _time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
                    "train_ms": _time(train(lambda: kernels.flash_attention(*leaves, causal, BLOCK_M, BLOCK_N))),
                    "sdpa_train_ms": _time(train(lambda: F.scaled_dot_product_attention(*leaves, is_causal=causal))),
                    "max_abs_diff": f"{diff:.3g}", "max_grad_diff": f"{grad_diff:.3g}",
                }
                for key in ("forward_ms", "sdpa_forward_ms", "train_ms", "sdpa_train_ms"):
                    row[key] = f"{row[key]:.4g}"
                print(", ".join(f"{key}={value}" for key, value in row.items() if key != "gpu"), flush=True)
                rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=CSV, help="where to write the table (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="two lengths only")
    parser.add_argument("--float32", action="store_true", help="also time float32 inputs")
    args = parser.parse_args(argv)

    from attention_course import kernels  # before triton: without a GPU it selects the interpreter

    if not kernels.on_gpu():
        print(MESSAGE_NO_GPU)
        return 0
    import torch
    import triton

    dtypes = (torch.float16, torch.float32) if args.float32 else (torch.float16,)
    rows = measure(LENGTHS[:2] if args.quick else LENGTHS, dtypes)
    comment = (f"measured by bench/kernels.py on {_dt.date.today().isoformat()}: {torch.cuda.get_device_name()}, "
               f"torch {torch.__version__}, triton {triton.__version__}")
    write_csv(args.out, rows, [comment])
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
