"""bench/kernels.py and what chapter 11 may say about GPU speed.

Without a CUDA GPU the benchmark must refuse to time anything (the interpreter's times measure nothing
about speed) and write no table; and the chapter may quote a GPU time only when the table that the
benchmark writes on a GPU, ``bench/kernels_gpu.csv``, exists.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "kernels.py"
GPU_TABLE = ROOT / "bench" / "kernels_gpu.csv"
CHAPTER = ROOT / "solutions" / "11_triton_kernel.ipynb"

# A number followed by a unit of time or a rate, or a speed-up: what a speed claim looks like.
SPEED = re.compile(r"\d[\d,.]*\s*(ms|µs|us|milliseconds?|microseconds?|seconds?|s\b|TFLOP/?s|GFLOP/?s|TB/s|GB/s"
                   r"|(x|×|times) (faster|slower|the speed))", re.IGNORECASE)


def _chapter_text_before_exercises() -> str:
    """The markdown and the outputs of chapter 11 up to its Exercises section."""
    cells = json.loads(CHAPTER.read_text(encoding="utf-8"))["cells"]
    parts = []
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and source.startswith("## Exercises"):
            break
        if cell["cell_type"] == "markdown":
            parts.append(source)
        for output in cell.get("outputs", []):
            parts.append("".join(output.get("text", "")))
            parts.append("".join(output.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


def test_the_speed_pattern_can_fail():
    assert SPEED.search("the kernel took 1.25 ms at 4096 tokens")
    assert SPEED.search("about 3× faster than SDPA")
    assert SPEED.search("reaching 310 TFLOPs on an H100")
    assert not SPEED.search("2048 MiB with blocks of 16, 36 of 64 blocks, 228 KB of shared memory")


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="chapter 11's kernels extra is missing")
def test_without_a_gpu_the_benchmark_refuses_to_time_and_writes_nothing(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the benchmark times the compiled kernels")
    existed = GPU_TABLE.exists()
    out = tmp_path / "kernels_gpu.csv"
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "interpreter times measure nothing about speed" in done.stdout
    assert "no CSV is written" in done.stdout
    assert not out.exists()
    assert GPU_TABLE.exists() == existed


def test_the_chapter_quotes_gpu_numbers_only_from_the_gpu_table():
    text = _chapter_text_before_exercises()
    if not GPU_TABLE.exists():
        claims = [m.group(0) for m in SPEED.finditer(text)]
        assert not claims, f"chapter 11 states speeds with no bench/kernels_gpu.csv to take them from: {claims}"
        assert "bench/kernels_gpu.csv does not exist" in text      # the GPU cell's output says so
        assert "no GPU was available" in text                       # and so does the prose
    else:
        lines = GPU_TABLE.read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith("# measured by bench/kernels.py on "), lines[0]
        gpu = lines[0].split(": ", 1)[1].split(",")[0]
        assert gpu in text, f"the chapter must name the GPU of bench/kernels_gpu.csv ({gpu})"
        assert "bench/kernels_gpu.csv does not exist" not in text, "re-execute chapter 11: the GPU table exists now"
