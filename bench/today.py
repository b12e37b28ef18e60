#!/usr/bin/env python3
"""Chapter 10's measurements: what each attention layout caches and how fast it decodes, and whether
FlexAttention runs on this CPU.

    .venv/bin/python bench/today.py            # measure and print the tables
    .venv/bin/python bench/today.py --save     # also write bench/today_decode.csv, bench/today_shapes.csv,
                                               # bench/today_delta.csv and bench/today_flex.csv
    .venv/bin/python bench/today.py --quick    # two lengths, eager FlexAttention only (a smoke test)

**Decode.** One small model size, float32, batch 1, ``NUM_LAYERS`` attention layers (no MLPs: only
attention differs between the variants), ``d_model`` 256 and 8 query heads of 32:

* ``mha``: :class:`attention_course.grouped.GroupedQueryAttention` with 8 key/value heads;
* ``gqa``: the same with 2 key/value heads;
* ``mla`` / ``mla_absorbed``: :class:`attention_course.latent.MultiHeadLatentAttention`, latent 64 +
  rotated key 16 per token, decoding by rebuilding keys and values / in the latent space;
* ``swa``: ``mha`` with a sliding window of ``WINDOW`` tokens and its ring-buffer cache.

For each context length ``n`` every layer's cache is filled with ``n`` random tokens (their values do
not change the time), then ``STEPS`` one-token decode steps run per variant, in rounds: in each round
every variant runs ``BLOCK`` steps in a row (as one model decoding would: its caches stay warm between
its own steps; the turns spread the machine's load over all variants). The table keeps the fastest and
the median step. ``cache_bytes_per_token`` is the bytes the
caches hold for ``n`` tokens (every layer) divided by ``n``; the ratios are to ``mha`` at the same
length, from the same run.

**Shapes.** Cache bytes per token (bf16, 2 bytes a number) of published model shapes, and the cache
at 4k, 32k and 128k tokens (a sliding-window layer holds at most its window); the source of each shape
is in :data:`SHAPES`.

**Delta rule.** The gated delta rule (:mod:`attention_course.linear_attention`) on 4 heads of 32, float32,
``T`` = 256 ... 2048 tokens: the time of each form (fastest of 2) and the largest difference of the
parallel and chunked (64) outputs from the recurrent ones.

**FlexAttention.** :func:`attention_course.score_mods.probe_flex_attention`, eager and compiled (a
causal document mask with an ALiBi + soft-cap score_mod), then the fastest of 5 calls at 1024 tokens
of each, beside :func:`attention_course.score_mods.attention_with_mods` (every score materialised).

``torch.set_num_threads(1)`` (``--threads``): a decode step is a few dozen small operations that a second
thread barely helps, and one thread is less at the mercy of other processes on a shared machine. The
script never asserts: timings depend on the machine (``tests/test_today_bench.py`` checks the sizes).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from _common import ROOT, measured_by, write_csv  # bench/_common.py; puts the repository root on sys.path
from attention_course import grouped, latent, linear_attention as la, score_mods as sm, windowed as win

D_MODEL, HEADS, HEAD_DIM, NUM_LAYERS = 256, 8, 32, 4
LATENT, ROPE = 64, 16
WINDOW = 512
LENGTHS, QUICK_LENGTHS = [256, 1024, 4096, 8192], [256, 1024]
STEPS, BLOCK = 24, 4
DECODE_CSV = ROOT / "bench" / "today_decode.csv"
SHAPES_CSV = ROOT / "bench" / "today_shapes.csv"
FLEX_CSV = ROOT / "bench" / "today_flex.csv"
DELTA_CSV = ROOT / "bench" / "today_delta.csv"
DELTA_LENGTHS, QUICK_DELTA_LENGTHS = [256, 1024, 2048], [256]

# name, attention, layers, kv heads (or None), head_dim (or None), latent + rope (or None), window, pattern, source
SHAPES = [
    # Llama 2 7B: 32 layers, 32 heads of 128, no GQA (Touvron et al., 2023; Hugging Face config).
    ("Llama 2 7B", "MHA", 32, 32, 128, None, None, None, "Touvron et al. 2023; HF config (not re-checked here)"),
    # Llama 3 8B: 32 layers, 8 key/value heads of 128 (HF config.json: num_key_value_heads 8, checked).
    ("Llama 3 8B", "GQA", 32, 8, 128, None, None, None, "HF config.json meta-llama/Meta-Llama-3-8B (checked)"),
    # Mistral 7B v0.1: 32 layers, 8 KV heads of 128, sliding_window 4096 in every layer (config checked).
    ("Mistral 7B v0.1", "GQA + window", 32, 8, 128, None, 4096, 0, "Jiang et al. 2023; HF config.json (checked)"),
    # Gemma 2 2B: 26 layers, 4 KV heads of 256, window 4096 in every other layer (config checked).
    ("Gemma 2 2B", "GQA + local/global", 26, 4, 256, None, 4096, 1, "HF config.json of a Gemma 2 2B (checked)"),
    # DeepSeek-V2: 60 layers, MLA kv_lora_rank 512 + qk_rope_head_dim 64 (configs checked).
    ("DeepSeek-V2", "MLA", 60, None, None, (512, 64), None, None, "DeepSeek-AI 2024; model config (checked)"),
    # The same 60 layers with 128 uncompressed heads of 128 (+64 rotated) keys and 128 values: hypothetical.
    ("DeepSeek-V2 as MHA", "MHA (hypothetical)", 60, 128, 160, None, None, None,
     "keys 128+64 and values 128 per head, averaged to 160 per number pair"),
    # DeepSeek-V3: 61 layers, same MLA shape (config.json: num_hidden_layers 61, kv_lora_rank 512, checked).
    ("DeepSeek-V3", "MLA", 61, None, None, (512, 64), None, None, "DeepSeek-V3 config.json (checked)"),
]


def provenance(threads: int) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{measured_by('today.py', threads)}; 1-minute load average at the end {load:.1f}"


# ------------------------------------------------------------------------------------------- decode

def _fill_ring(cache: win.RingKVCache, n: int, g: torch.Generator) -> None:
    cache.keys.copy_(torch.randn(cache.keys.shape, generator=g))
    cache.values.copy_(torch.randn(cache.values.shape, generator=g))
    for p in range(max(0, n - cache.window), n):
        cache.positions[cache.slot_of(p)] = p
    cache.seen = n


def _variants(n: int, g: torch.Generator) -> dict:
    """name -> (step function, caches); every layer's cache filled with n random tokens."""
    out = {}
    specs = {"mha": dict(num_kv_heads=HEADS), "gqa": dict(num_kv_heads=2),
             "swa": dict(num_kv_heads=HEADS, window=WINDOW)}
    for name, kw in specs.items():
        layers = [grouped.GroupedQueryAttention(D_MODEL, HEADS, head_dim=HEAD_DIM, **kw) for _ in range(NUM_LAYERS)]
        caches = [layer.new_cache(1, n + STEPS + 1) for layer in layers]
        for cache in caches:
            if isinstance(cache, win.RingKVCache):
                _fill_ring(cache, n, g)
            else:
                shape = (1, kw["num_kv_heads"], n, HEAD_DIM)
                cache.append(0, torch.randn(shape, generator=g), torch.randn(shape, generator=g))
        out[name] = (layers, caches, None)
    mla_layers = [latent.MultiHeadLatentAttention(D_MODEL, HEADS, HEAD_DIM, LATENT, ROPE) for _ in range(NUM_LAYERS)]
    for name, absorb in (("mla", False), ("mla_absorbed", True)):
        caches = [layer.new_cache(1, n + STEPS + 1) for layer in mla_layers]
        for cache in caches:
            cache.append(torch.randn(1, n, LATENT, generator=g), torch.randn(1, n, ROPE, generator=g))
        out[name] = (mla_layers, caches, absorb)
    return out


def _cache_bytes(caches) -> int:
    total = 0
    for cache in caches:
        if isinstance(cache, latent.LatentKVCache):
            total += cache.nbytes()
        elif isinstance(cache, win.RingKVCache):
            filled = int((cache.positions >= 0).sum())
            total += cache.nbytes() * filled // cache.positions.numel()
        else:                                       # PreallocatedKVCache: the filled part only
            k = cache.keys[0]
            total += 2 * cache.seen(0) * k.shape[0] * k.shape[1] * k.shape[3] * k.element_size()
    return total


@torch.no_grad()
def measure_decode(lengths) -> list:
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    rows = []
    for n in lengths:
        variants = _variants(n, g)
        bytes_per_token = {name: _cache_bytes(caches) / n for name, (_, caches, _) in variants.items()}
        times = {name: [] for name in variants}
        x = torch.randn(1, 1, D_MODEL, generator=g)
        for _ in range(STEPS // BLOCK):                 # rounds; in each, every variant runs BLOCK steps in a row
            for name, (layers, caches, absorb) in variants.items():
                for _ in range(BLOCK):
                    start = time.perf_counter()
                    h = x
                    for layer, cache in zip(layers, caches):
                        h = (layer.decode_step(h, cache) if absorb is None
                             else layer.decode_step(h, cache, absorb=absorb))
                    times[name].append(time.perf_counter() - start)
        for name in variants:
            rows.append(dict(context_tokens=n, variant=name,
                             cache_bytes_per_token=f"{bytes_per_token[name]:.1f}",
                             cache_ratio_to_mha=f"{bytes_per_token[name] / bytes_per_token['mha']:.4f}",
                             decode_min_ms=f"{min(times[name]) * 1e3:.3f}",
                             decode_median_ms=f"{statistics.median(times[name]) * 1e3:.3f}",
                             time_ratio_to_mha=f"{min(times[name]) / min(times['mha']):.2f}"))
    return rows


# ------------------------------------------------------------------------------------------- shapes

def shape_rows() -> list:
    rows = []
    for name, kind, layers, kv_heads, head_dim, mla, window, local_per_global, source in SHAPES:
        if mla is not None:
            per_layer = sum(mla) * 2
            per_token = latent.mla_cache_bytes_per_token(layers, *mla, bytes_per_number=2)
        else:
            per_layer = grouped.kv_cache_bytes_per_token(1, kv_heads, head_dim, 2)
            per_token = grouped.kv_cache_bytes_per_token(layers, kv_heads, head_dim, 2)
        pattern = win.layer_pattern(layers, local_per_global) if window else ["global"] * layers
        if window and local_per_global == 0:
            pattern = ["local"] * layers
        row = dict(model=name, attention=kind, layers=layers, kv_heads=kv_heads or "", head_dim=head_dim or "",
                   latent_plus_rope=f"{mla[0]}+{mla[1]}" if mla else "", window=window or "",
                   bytes_per_token_bf16=per_token)
        for context, label in ((4096, "4k"), (32768, "32k"), (131072, "128k")):
            held = win.cached_tokens(pattern, context, window or context)
            row[f"cache_MiB_at_{label}"] = f"{held * per_layer / 2 ** 20:.0f}"
        row["source"] = source
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------- delta rule

def delta_rows(lengths) -> list:
    g = torch.Generator().manual_seed(2)
    rows = []
    for T in lengths:
        q = torch.randn(1, 4, T, 32, generator=g)
        k = torch.nn.functional.normalize(torch.randn(1, 4, T, 32, generator=g), dim=-1)
        v = torch.randn(1, 4, T, 32, generator=g)
        beta = torch.rand(1, 4, T, generator=g) * 0.98 + 0.01
        alpha = torch.rand(1, 4, T, generator=g) * 0.5 + 0.5
        forms = {"recurrent": lambda: la.delta_rule_recurrent(q, k, v, beta, alpha)[0],
                 "parallel": lambda: la.delta_rule_parallel(q, k, v, beta, alpha)[0],
                 "chunked_64": lambda: la.delta_rule_chunked(q, k, v, beta, alpha, 64)[0]}
        outs = {name: fn() for name, fn in forms.items()}
        for name, fn in forms.items():
            rows.append(dict(tokens=T, form=name, ms=f"{_best_ms(fn, runs=2):.1f}",
                             max_abs_diff_vs_recurrent=f"{(outs[name] - outs['recurrent']).abs().max().item():.1e}"))
    return rows


# ------------------------------------------------------------------------------------------- flex

def _best_ms(fn, runs=5):
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def flex_rows(compiled_too: bool) -> list:
    import warnings
    rows = []
    for compiled in ([False, True] if compiled_too else [False]):
        rows.append(sm.probe_flex_attention(compiled=compiled))
    # steady-state time at 1024 tokens, 4 heads of 64, causal + soft-cap
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 4, 1024, 64, generator=g) for _ in range(3))
    cap = sm.softcap_score_mod(20.0)
    times = {"attention_with_mods": _best_ms(lambda: sm.attention_with_mods(q, k, v, cap, sm.causal_mask_mod))}
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            block = create_block_mask(sm.causal_mask_mod, None, None, 1024, 1024, device="cpu")
            times["flex_eager"] = _best_ms(lambda: flex_attention(q, k, v, score_mod=cap, block_mask=block))
            if compiled_too:
                fn = torch.compile(flex_attention)
                fn(q, k, v, score_mod=cap, block_mask=block)
                times["flex_compiled"] = _best_ms(lambda: fn(q, k, v, score_mod=cap, block_mask=block))
    except Exception as error:  # noqa: BLE001 - reported, not raised
        print("FlexAttention timing failed:", type(error).__name__, error)
    for row in rows:
        key = "flex_compiled" if row["mode"] == "compiled" else "flex_eager"
        row["ms_1024_tokens"] = f"{times.get(key, float('nan')):.2f}"
        row["reference_ms_1024_tokens"] = f"{times['attention_with_mods']:.2f}"
        row["max_abs_diff"] = f"{row['max_abs_diff']:.2e}"
        row["seconds_first_call"] = f"{row['seconds_first_call']:.1f}"
    return rows


def _print(title, rows):
    print(f"\n{title}")
    print(",".join(rows[0]))
    for row in rows:
        print(",".join(str(v) for v in row.values()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    decode = measure_decode(QUICK_LENGTHS if args.quick else LENGTHS)
    shapes = shape_rows()
    delta = delta_rows(QUICK_DELTA_LENGTHS if args.quick else DELTA_LENGTHS)
    flex = flex_rows(compiled_too=not args.quick)
    _print("decode", decode)
    _print("shapes", shapes)
    _print("delta rule", delta)
    _print("flex", flex)
    print(f"\n{time.perf_counter() - started:.0f} s")
    if args.save:
        line = provenance(args.threads)
        model = (f"{NUM_LAYERS} attention layers, d_model {D_MODEL}, {HEADS} query heads of {HEAD_DIM}, float32, "
                 f"batch 1; gqa 2 key/value heads; mla latent {LATENT} + rope {ROPE}; swa window {WINDOW}; "
                 f"caches filled with n random tokens, then {STEPS} one-token steps per variant, in rounds of "
                 f"{BLOCK} steps each; ms = all layers of one step")
        write_csv(DECODE_CSV, decode, [line, model])
        write_csv(SHAPES_CSV, shapes, ["cache bytes per token of published shapes, bf16 (2 bytes a number); "
                                       "cache_MiB_at_N = all layers at N tokens (a window layer holds at most "
                                       "its window); computed by bench/today.py"])
        write_csv(FLEX_CSV, flex, [line, "torch.nn.attention.flex_attention on the CPU: causal document mask, "
                                         "ALiBi + soft-cap score_mod, 128 tokens, against "
                                         "attention_course.score_mods.attention_with_mods; ms = fastest of 5 "
                                         "at 1024 tokens, 4 heads of 64, causal + soft-cap 20"])
        write_csv(DELTA_CSV, delta, [line, "gated delta rule, batch 1, 4 heads, d_k = d_v = 32, float32, keys "
                                          "L2-normalised, beta in (0.01, 0.99), alpha in (0.5, 1); ms = fastest of 2"])
        print("wrote", DECODE_CSV.name, SHAPES_CSV.name, DELTA_CSV.name, FLEX_CSV.name)


if __name__ == "__main__":
    main()
