"""The tables that ``bench/today.py --save`` wrote for Chapter 10 (``bench/today_*.csv``).

Sizes are exact and checked against numbers worked out here by hand from the published shapes;
timings depend on the machine and its load, so only orders of magnitude that no load can turn
around are asserted (rebuilding MLA's keys from the latents at every step is far slower than
working in the latent space once the context is long).
"""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def _read(name: str) -> tuple:
    path = BENCH / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run .venv/bin/python bench/today.py --save")
    lines = path.read_text(encoding="utf-8").splitlines()
    comments = [line[2:] for line in lines if line.startswith("# ")]
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    return comments, rows


def test_decode_table_cache_sizes_are_exact():
    comments, rows = _read("today_decode.csv")
    assert comments[0].startswith("measured by bench/today.py on ")
    by = {(int(r["context_tokens"]), r["variant"]): r for r in rows}
    lengths = sorted({n for n, _ in by})
    assert lengths == [256, 1024, 4096, 8192]
    for n in lengths:
        # 4 layers; MHA 2 x 8 heads x 32 numbers; GQA 2 heads; MLA 64 + 16; float32
        assert float(by[n, "mha"]["cache_bytes_per_token"]) == 4 * 2 * 8 * 32 * 4
        assert float(by[n, "gqa"]["cache_ratio_to_mha"]) == 0.25
        assert float(by[n, "mla"]["cache_bytes_per_token"]) == 4 * (64 + 16) * 4
        assert float(by[n, "mla_absorbed"]["cache_ratio_to_mha"]) == pytest.approx(80 / 512, abs=1e-4)  # 4 decimals
        assert float(by[n, "swa"]["cache_ratio_to_mha"]) == pytest.approx(min(n, 512) / n, abs=1e-4)


def test_decode_table_absorption_pays_at_long_contexts():
    _, rows = _read("today_decode.csv")
    by = {(int(r["context_tokens"]), r["variant"]): float(r["decode_min_ms"]) for r in rows}
    assert by[8192, "mla"] > 2 * by[8192, "mla_absorbed"], by


def test_shapes_table_by_hand():
    _, rows = _read("today_shapes.csv")
    by = {r["model"]: r for r in rows}
    assert int(by["Llama 2 7B"]["bytes_per_token_bf16"]) == 2 * 32 * 32 * 128 * 2 == 524288
    assert by["Llama 2 7B"]["cache_MiB_at_4k"] == "2048"                     # 4096 x 0.5 MiB
    assert int(by["Llama 3 8B"]["bytes_per_token_bf16"]) == 131072
    assert by["Mistral 7B v0.1"]["cache_MiB_at_128k"] == "512"               # 4096 tokens x 128 KiB, every layer
    assert int(by["DeepSeek-V2"]["bytes_per_token_bf16"]) == 60 * 576 * 2
    assert int(by["DeepSeek-V3"]["bytes_per_token_bf16"]) == 61 * 576 * 2
    # Gemma 2 2B at 32k: 13 local layers hold 4096 tokens, 13 global ones 32768; 2 x 4 x 256 x 2 bytes each
    assert by["Gemma 2 2B"]["cache_MiB_at_32k"] == f"{(13 * 4096 + 13 * 32768) * 4096 / 2 ** 20:.0f}"


def test_flex_table_says_what_ran():
    _, rows = _read("today_flex.csv")
    eager = next(r for r in rows if r["mode"] == "eager")
    assert eager["ran"] in ("True", "False")
    if eager["ran"] == "True":
        assert float(eager["max_abs_diff"]) < 1e-5
    else:
        assert eager["error"], "a probe that did not run must say why"


def test_delta_table_forms_agree():
    comments, rows = _read("today_delta.csv")
    assert comments[0].startswith("measured by bench/today.py on ")
    forms = {(int(r["tokens"]), r["form"]): float(r["max_abs_diff_vs_recurrent"]) for r in rows}
    assert {form for _, form in forms} == {"recurrent", "parallel", "chunked_64"}
    for (tokens, form), diff in forms.items():
        assert diff < (1e-4 if form == "chunked_64" else 1e-2), (tokens, form, diff)   # float32
