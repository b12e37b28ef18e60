#!/usr/bin/env python3
"""Time each solution notebook's execution (and, with --suite, the whole test suite).

    .venv/bin/python bench/notebooks.py [--suite]

Prints one line per notebook, slowest first, against the target of 30 s per
notebook on 2 cores, then the suite's wall time when asked.
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from _common import ROOT  # bench/_common.py
TARGET_SECONDS = 30.0


def time_notebook(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", action="store_true", help="also time the whole pytest suite")
    args = parser.parse_args()
    os.environ.pop("MPLBACKEND", None)  # figures need the kernel's inline backend
    print(f"machine: {os.cpu_count()} cores, torch threads {__import__('torch').get_num_threads()}")
    timings = [(time_notebook(p), p.name) for p in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))]
    print(f"{'notebook':40s} {'seconds':>8s}  target {TARGET_SECONDS:.0f} s")
    for seconds, name in sorted(timings, reverse=True):
        print(f"{name:40s} {seconds:8.1f}  {'ok' if seconds < TARGET_SECONDS else 'OVER TARGET'}")
    print(f"{'all notebooks':40s} {sum(t for t, _ in timings):8.1f}")
    status = 0 if all(t < TARGET_SECONDS for t, _ in timings) else 1
    if args.suite:
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=ROOT)
        print(f"{'whole test suite (pytest -q)':40s} {time.perf_counter() - start:8.1f}  exit {result.returncode}")
        status = status or result.returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
