#!/usr/bin/env python3
"""Chapter 9's measurements: tiled attention's memory and the key-value cache's speed.

    .venv/bin/python bench/efficient.py            # measure and print the tables and targets
    .venv/bin/python bench/efficient.py --save     # also write bench/efficient_memory.csv,
                                                   # bench/efficient_training.csv and
                                                   # bench/efficient_decoding.csv (the chapter reads them)
    .venv/bin/python bench/efficient.py --quick    # small sizes only (a smoke test)
    .venv/bin/python bench/efficient.py --only training --save   # one part only; --save writes its CSV
    .venv/bin/python bench/efficient.py --only decoding --threads 1 --save-speedups
                                                   # only the speed-up row for 1 thread in
                                                   # bench/efficient_decoding_speedups.csv

**Training memory.** The same head, forward plus backward: each variant's output is
differentiated with respect to queries, keys and values (``torch.autograd.grad`` with one
fixed random output gradient), lengths 1024 ... 8192. ``naive`` and ``sdpa`` as above,
``tiled`` is the same tiled loop under autograd (which keeps every tile for the backward
pass), ``recompute`` is :func:`attention_course.efficient.tiled_attention_trainable` (the
backward pass recomputes each tile from the saved log-sum-exps, as FlashAttention does).
Peak memory as above (inputs excluded; the output and the three gradients included);
``saved_bytes`` is what autograd keeps between forward and backward (every tensor packed
for the backward pass, counted with ``torch.autograd.graph.saved_tensors_hooks``; the
inputs count too). The errors are the largest absolute differences from SDPA's output and
gradients. Written to ``bench/efficient_training.csv``.

**Memory.** One head of 64 features, batch 1, random queries, keys and values, sequence
lengths 256 ... 8192; every variant gets the same tensors. ``naive`` forms the
``(n, n)`` scores and weights (:func:`attention_course.efficient.naive_attention`),
``tiled`` walks over tiles of 128 x 128 (:func:`attention_course.efficient.tiled_attention`),
``sdpa`` is ``torch.nn.functional.scaled_dot_product_attention``; the ``causal`` variants
do the same with the causal mask (the tiled one skips the tiles above the diagonal).
Peak memory is the most bytes alive at once in PyTorch's CPU allocator during the call,
counted from its start (inputs excluded, output included), read from ``torch.profiler``
with ``profile_memory=True`` (:func:`attention_course.efficient.peak_memory`): exact and
repeatable. The script also prints the analytic size of the largest intermediate (the
``n x n`` score matrix, or one tile) and the largest absolute difference from SDPA's
output. Times (milliseconds, the fastest of three runs outside the profiler) are printed
too, to say honestly what pure PyTorch on a CPU does *not* show: a speed-up.

**Decoding.** :class:`attention_course.efficient.TinyCausalLM` (vocabulary 256,
d_model 128, 4 heads, 4 blocks built on Chapter 6's ``MultiHeadAttention``, random
weights, seed 0) generates 512 tokens greedily after an 8-token prompt, once recomputing
the whole sequence at every step and once with a key-value cache. Both must produce the
same tokens. Every step is timed; the two methods run alternately for ``--rounds``
rounds and the table keeps, for every step, the fastest of the rounds (other processes
on a shared machine can only make a step slower). The speed-up after ``N`` generated
tokens is the ratio of the summed step times of the first ``N`` steps; the whole-run
speed-up is the ratio of the fastest complete runs (512 tokens each way).

The speed-ups depend on the number of threads (a cached step is about a hundred small
operations, which a second thread barely helps; recomputing works on whole sequences).
``bench/efficient_decoding_speedups.csv`` keeps one row per thread count: the speed-ups
after 32 ... 512 tokens, the whole-run speed-up and its two times, the date and the load.
``--save`` writes the row of this run's thread count beside the per-step table
(``bench/efficient_decoding.csv``, which the chapter reads); ``--save-speedups`` writes
only that row and leaves the per-step table alone, so that other thread counts can be
added.

**Cache growth and prefill against decode** (``--only cache``). The same model. (a) For
``n`` = 256 ... 16384 cached tokens, one cache of each kind is filled with ``n`` random keys
and values per layer (their values do not change the time), then 32 one-token steps run,
alternating between :class:`attention_course.efficient.KVCache` (``torch.cat`` at every step)
and :class:`attention_course.efficient.PreallocatedKVCache` (written in place); the table
keeps the fastest and the median step of each (``efficient_cache_growth.csv``). (b) For
prompts of 64 ... 2048 tokens: the prefill (the whole prompt through ``forward_cached`` into
an empty cache; the fastest of three runs) and 64 decode steps after it (one token each; the
fastest step), as tokens per second (``efficient_prefill_decode.csv``).

``torch.set_num_threads(2)`` (``--threads``). The script prints PASS/FAIL lines for the
chapter's targets and never asserts: timings depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from _common import ROOT, cpu_name, measured_by, write_csv  # bench/_common.py; puts the repository root on sys.path
from attention_course import efficient as eff

HEAD_DIM, BLOCK = 64, 128
LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
QUICK_LENGTHS = [256, 1024]
MEMORY_CSV = ROOT / "bench" / "efficient_memory.csv"
DECODING_CSV = ROOT / "bench" / "efficient_decoding.csv"
SPEEDUPS_CSV = ROOT / "bench" / "efficient_decoding_speedups.csv"
TRAINING_CSV = ROOT / "bench" / "efficient_training.csv"
TRAINING_LENGTHS = [1024, 2048, 4096, 8192]
QUICK_TRAINING_LENGTHS = [256, 1024]
PARTS = ("memory", "decoding", "training", "cache")
CACHE_GROWTH_CSV = ROOT / "bench" / "efficient_cache_growth.csv"
PREFILL_DECODE_CSV = ROOT / "bench" / "efficient_prefill_decode.csv"
GROWTH_LENGTHS, GROWTH_STEPS = [256, 1024, 4096, 16384], 32
PREFILL_LENGTHS = [16, 64, 256, 1024]
INTENSITY_DIM, INTENSITY_ROWS = 4096, [1, 4, 16, 64, 256]
INTENSITY_CSV = ROOT / "bench" / "efficient_intensity.csv"
DECODE_STEPS = 64
MODEL = dict(vocab_size=256, d_model=128, num_heads=4, num_layers=4)
PROMPT, GENERATED = 8, 512
CHECKPOINTS = [32, 64, 128, 256, 512]


def provenance(threads: int) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{measured_by('efficient.py', threads)}; 1-minute load average at the end {load:.1f}"


def best_ms(fn, runs: int = 2) -> float:
    best = math.inf
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


# ---------------------------------------------------------------- memory

def memory_sweep(lengths: list) -> list:
    rows = []
    for n in lengths:
        g = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(1, 1, n, HEAD_DIM, generator=g) for _ in range(3))
        for causal in (False, True):
            variants = {
                "naive": lambda: eff.naive_attention(q, k, v, causal=causal),
                "tiled": lambda: eff.tiled_attention(q, k, v, BLOCK, BLOCK, causal=causal),
                "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
            }
            reference, _ = eff.peak_memory(variants["sdpa"])
            for name, fn in variants.items():
                out, peak = eff.peak_memory(fn)
                err = (out - reference).abs().max().item()
                ms = best_ms(fn, runs=3)
                largest = {"naive": 4 * n * n, "tiled": 4 * BLOCK * BLOCK, "sdpa": 0}[name]
                rows.append(dict(tokens=n, variant=name + (" causal" if causal else ""), peak_bytes=peak,
                                 largest_intermediate_bytes=largest, max_abs_err_vs_sdpa=err, ms=ms))
                del out
            print(f"  {n:>5} tokens{' causal' if causal else '':7} done", file=sys.stderr)
    return rows


def print_memory(rows: list) -> None:
    print(f"{'tokens':>6} {'variant':>13} | {'peak MB':>9} {'largest tensor MB':>17} | "
          f"{'max |err| vs SDPA':>17} | {'ms':>8}")
    for r in rows:
        largest = f"{r['largest_intermediate_bytes'] / 2**20:17.3f}" if r["largest_intermediate_bytes"] else \
            f"{'(fused)':>17}"
        print(f"{r['tokens']:>6} {r['variant']:>13} | {r['peak_bytes'] / 2**20:9.3f} {largest} | "
              f"{r['max_abs_err_vs_sdpa']:17.2e} | {r['ms']:8.1f}")


def causal_tiles(n: int) -> tuple:
    grid = eff.causal_tile_map(n, BLOCK)
    return int((grid > 0).sum()), grid.numel()


# ---------------------------------------------------------------- training memory

def saved_bytes(fn) -> int:
    """Bytes of every tensor autograd packs for the backward pass while ``fn()`` runs."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def training_sweep(lengths: list) -> list:
    rows = []
    for n in lengths:
        g = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(1, 1, n, HEAD_DIM, generator=g).requires_grad_() for _ in range(3))
        d_out = torch.randn(1, 1, n, HEAD_DIM, generator=g)
        forwards = {
            "naive": lambda: eff.naive_attention(q, k, v),
            "tiled": lambda: eff.tiled_attention(q, k, v, BLOCK, BLOCK),
            "recompute": lambda: eff.tiled_attention_trainable(q, k, v, BLOCK, BLOCK),
            "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        }

        def step(forward):
            out = forward()
            return (out.detach(),) + torch.autograd.grad(out, (q, k, v), d_out)

        reference, _ = eff.peak_memory(lambda: step(forwards["sdpa"]))
        for name, forward in forwards.items():
            results, peak = eff.peak_memory(lambda: step(forward))
            err = (results[0] - reference[0]).abs().max().item()
            grad_err = max((a - b).abs().max().item() for a, b in zip(results[1:], reference[1:]))
            del results
            saved = saved_bytes(forward)
            ms = best_ms(lambda: step(forward), runs=2)
            rows.append(dict(tokens=n, variant=name, peak_bytes=peak, saved_bytes=saved,
                             max_abs_err_vs_sdpa=err, max_abs_grad_err_vs_sdpa=grad_err, ms=ms))
        print(f"  {n:>5} tokens training done", file=sys.stderr)
    return rows


def print_training(rows: list) -> None:
    by = {(r["tokens"], r["variant"]): r for r in rows}
    names = ("naive", "tiled", "recompute", "sdpa")
    print(f"{'tokens':>6} | " + " ".join(f"{name + ' MB':>12}" for name in names) + " | "
          f"{'recompute/naive':>15} | " + " ".join(f"{'saved ' + name:>15}" for name in names))
    for n in sorted({r["tokens"] for r in rows}):
        peaks = [by[(n, name)]["peak_bytes"] for name in names]
        saved = [by[(n, name)]["saved_bytes"] for name in names]
        print(f"{n:>6} | " + " ".join(f"{p / 2**20:12.2f}" for p in peaks) + " | "
              f"{f'1/{peaks[0] / peaks[2]:.0f}':>15} | " + " ".join(f"{b / 2**20:12.2f} MB" for b in saved))
    print(f"\n{'tokens':>6} {'variant':>10} | {'max |out err|':>13} {'max |grad err|':>14} | {'ms':>8}")
    for r in rows:
        print(f"{r['tokens']:>6} {r['variant']:>10} | {r['max_abs_err_vs_sdpa']:13.2e} "
              f"{r['max_abs_grad_err_vs_sdpa']:14.2e} | {r['ms']:8.1f}")


# ---------------------------------------------------------------- decoding

def decoding(generated: int, rounds: int) -> dict:
    torch.manual_seed(0)
    model = eff.TinyCausalLM(context_length=PROMPT + generated, **MODEL).eval()
    prompt = torch.randint(0, MODEL["vocab_size"], (1, PROMPT), generator=torch.Generator().manual_seed(1))
    for use_cache in (False, True):                      # warm-up
        eff.generate(model, prompt, 16, use_cache)
    steps = {False: [math.inf] * generated, True: [math.inf] * generated}
    totals = {False: math.inf, True: math.inf}
    outputs = {}
    for r in range(rounds):
        for use_cache in (False, True):
            stamps = [time.perf_counter()]
            ids = eff.generate(model, prompt, generated, use_cache,
                               on_token=lambda step: stamps.append(time.perf_counter()))
            durations = [b - a for a, b in zip(stamps, stamps[1:])]
            steps[use_cache] = [min(old, new) for old, new in zip(steps[use_cache], durations)]
            totals[use_cache] = min(totals[use_cache], stamps[-1] - stamps[0])
            outputs[use_cache] = ids
        print(f"  decoding round {r + 1}/{rounds} done", file=sys.stderr)
    with torch.no_grad():   # the last step's logits, both ways, on the full generated sequence
        full = model(outputs[True][:, :-1])[:, -1]
        cache = model.new_cache()
        model.forward_cached(outputs[True][:, :PROMPT], cache)
        for t in range(PROMPT, outputs[True].shape[1] - 1):
            last = model.forward_cached(outputs[True][:, t:t + 1], cache)[:, -1]
    return dict(steps=steps, totals=totals, same_tokens=torch.equal(outputs[False], outputs[True]),
                logit_gap=(full - last).abs().max().item(), cache_bytes=cache.nbytes(),
                tokens=outputs[True][0, PROMPT:PROMPT + 12].tolist())


def cumulative_speedups(steps: dict, checkpoints: list) -> dict:
    return {n: sum(steps[False][:n]) / sum(steps[True][:n]) for n in checkpoints if n <= len(steps[True])}


# ---------------------------------------------------------------- cache growth, prefill and decode

def _cache_model(context: int) -> eff.TinyCausalLM:
    torch.manual_seed(0)
    return eff.TinyCausalLM(context_length=context, **MODEL).eval()


@torch.no_grad()
def cache_growth(lengths: list, steps: int) -> list:
    """Decoding steps after ``n`` cached tokens, with the concatenating and the preallocated cache.

    The caches are filled with random keys and values of ``n`` tokens (what they hold does not
    change the time of a step), then ``steps`` one-token steps run, alternating between the two
    caches so that the load of the machine affects both alike.
    """
    rows = []
    gen = torch.Generator().manual_seed(2)
    for n in lengths:
        model = _cache_model(n + steps + 1)
        attn = model.blocks[0].attn
        caches = {"concat": model.new_cache("concat"), "preallocated": model.new_cache("preallocated")}
        for cache in caches.values():
            for layer in range(model.num_layers):
                shape = (1, attn.num_heads, n, attn.head_dim)
                cache.append(layer, torch.randn(shape, generator=gen), torch.randn(shape, generator=gen))
        token = torch.zeros(1, 1, dtype=torch.long)
        times = {kind: [] for kind in caches}
        for _ in range(steps):
            for kind, cache in caches.items():
                start = time.perf_counter()
                model.forward_cached(token, cache)
                times[kind].append(time.perf_counter() - start)
        row = dict(cached_tokens=n)
        for kind, t in times.items():
            row[f"{kind}_min_ms"] = min(t) * 1e3
            row[f"{kind}_median_ms"] = sorted(t)[steps // 2] * 1e3
        rows.append(row)
        print(f"  cache growth {n} done", file=sys.stderr)
    return rows


@torch.no_grad()
def prefill_decode(lengths: list, decode_steps: int) -> list:
    model = _cache_model(max(lengths) + decode_steps)
    gen = torch.Generator().manual_seed(3)
    rows = []
    for n in lengths:
        prompt = torch.randint(0, MODEL["vocab_size"], (1, n), generator=gen)
        prefill = math.inf
        for _ in range(3):
            cache = model.new_cache("preallocated", max_len=n + decode_steps)
            start = time.perf_counter()
            logits = model.forward_cached(prompt, cache)
            prefill = min(prefill, time.perf_counter() - start)
        fresh, steps = logits[:, -1:].argmax(-1), []
        for _ in range(decode_steps):
            start = time.perf_counter()
            fresh = model.forward_cached(fresh, cache)[:, -1:].argmax(-1)
            steps.append(time.perf_counter() - start)
        decode = min(steps)
        rows.append(dict(prompt_tokens=n, prefill_ms=prefill * 1e3, prefill_tokens_per_s=n / prefill,
                         decode_ms_per_token=decode * 1e3, decode_tokens_per_s=1 / decode))
        print(f"  prefill/decode {n} done", file=sys.stderr)
    return rows


@torch.no_grad()
def weight_throughput(dim: int, row_counts: list) -> list:
    """One ``dim x dim`` float32 linear map (64 MB at 4096: more than the CPU's caches) applied to
    ``rows`` rows at once: the fastest of five runs, as time, GFLOP/s and GB/s of weights read."""
    gen = torch.Generator().manual_seed(4)
    weight = torch.randn(dim, dim, generator=gen) / dim ** 0.5
    rows_out = []
    for rows in row_counts:
        x = torch.randn(rows, dim, generator=gen)
        best = math.inf
        for _ in range(5):
            start = time.perf_counter()
            F.linear(x, weight)
            best = min(best, time.perf_counter() - start)
        flops, moved = 2 * rows * dim * dim, 4 * (dim * dim + 2 * rows * dim)
        rows_out.append(dict(rows=rows, ms=best * 1e3, gflop_per_s=flops / best / 1e9,
                             weight_gb_per_s=4 * dim * dim / best / 1e9, flop_per_byte=flops / moved))
    return rows_out
def save_speedup_row(dec: dict, speedups: dict, generated: int, threads: int, rounds: int) -> None:
    """Replace (or add) this thread count's row of ``SPEEDUPS_CSV``; other rows stay."""
    import csv
    import datetime as dt

    row = dict(threads=threads, date=dt.date.today().isoformat(), torch=torch.__version__,
               load_average_1min_end=f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "",
               rounds=rounds, generated=generated)
    for n in CHECKPOINTS:
        row[f"speedup_after_{n}"] = f"{speedups[n]:.2f}" if n in speedups else ""
    whole = dec["totals"][False] / dec["totals"][True]
    row.update(speedup_whole_run=f"{whole:.2f}", recompute_whole_run_ms=f"{dec['totals'][False] * 1e3:.0f}",
               cached_whole_run_ms=f"{dec['totals'][True] * 1e3:.0f}", same_tokens=dec["same_tokens"])
    rows = []
    if SPEEDUPS_CSV.exists():
        lines = SPEEDUPS_CSV.read_text(encoding="utf-8").splitlines()
        rows = [r for r in csv.DictReader(line for line in lines if not line.startswith("#"))
                if int(r["threads"]) != threads]
    rows = sorted(rows + [row], key=lambda r: int(r["threads"]))
    write_csv(SPEEDUPS_CSV, rows, comments=(
        f"measured by bench/efficient.py (decoding part) on a {os.cpu_count()}-core {cpu_name()}; one row per "
        f"thread count (torch.set_num_threads), each from its own run on the date given",
        f"TinyCausalLM {MODEL}, random weights (seed 0), prompt {PROMPT} tokens, greedy; speedup_after_N = summed "
        f"fastest recompute steps / summed fastest cached steps over the first N generated tokens (fastest of "
        f"`rounds` rounds per step); speedup_whole_run = fastest complete recompute run / fastest complete "
        f"cached run"))


# ---------------------------------------------------------------- main

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", action="store_true", help="write the CSV files the chapter reads")
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--only", choices=PARTS, action="append",
                        help="measure only this part (repeatable); --save then writes only its CSV")
    parser.add_argument("--save-speedups", action="store_true",
                        help="write only this thread count's row of bench/efficient_decoding_speedups.csv")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    parts = args.only or list(PARTS)
    lengths = QUICK_LENGTHS if args.quick else LENGTHS
    training_lengths = QUICK_TRAINING_LENGTHS if args.quick else TRAINING_LENGTHS
    generated = 64 if args.quick else GENERATED
    lines = []                      # the targets, (ok, text)

    print(f"{provenance(args.threads)}\n")
    if "memory" in parts:
        print(f"== Memory: one head of {HEAD_DIM}, batch 1, tiles of {BLOCK} x {BLOCK}; peak MB = most bytes alive "
              f"at once in the CPU allocator during the call (torch.profiler)\n")
        rows = memory_sweep(lengths)
        print_memory(rows)
        top = max(lengths)
        by = {(r["tokens"], r["variant"]): r for r in rows}
        computed, total = causal_tiles(top)
        print(f"\ncausal tiling at {top} tokens: {computed} of {total} tiles computed "
              f"({computed / total:.1%}), {total - computed} skipped above the diagonal")
        naive, tiled = by[(top, "naive")], by[(top, "tiled")]
        ratio = tiled["peak_bytes"] / naive["peak_bytes"]
        worst_err = max(by[(top, "tiled")]["max_abs_err_vs_sdpa"], by[(top, "tiled causal")]["max_abs_err_vs_sdpa"])
        lines += [
            (ratio <= 0.1, f"tiled peak memory at {top} tokens <= 1/10 of naive: {tiled['peak_bytes'] / 2**20:.2f} MB "
                           f"vs {naive['peak_bytes'] / 2**20:.2f} MB = 1/{1 / ratio:.0f}"),
            (worst_err <= 1e-5, f"tiled within 1e-5 of SDPA at {top} tokens: max |err| {worst_err:.2e} "
                                f"(plain {by[(top, 'tiled')]['max_abs_err_vs_sdpa']:.2e}, "
                                f"causal {by[(top, 'tiled causal')]['max_abs_err_vs_sdpa']:.2e})"),
        ]

    if "training" in parts:
        print(f"\n== Training memory: the same head, forward + backward (gradients of queries, keys and values); "
              f"peak MB as above, saved = what autograd keeps for the backward pass\n")
        train_rows = training_sweep(training_lengths)
        print_training(train_rows)
        tby = {(r["tokens"], r["variant"]): r for r in train_rows}
        at = 4096 if 4096 in training_lengths else max(training_lengths)
        naive_peak, recompute_peak = tby[(at, "naive")]["peak_bytes"], tby[(at, "recompute")]["peak_bytes"]
        grad_err = max(r["max_abs_grad_err_vs_sdpa"] for r in train_rows if r["variant"] == "recompute")
        lines += [
            (recompute_peak * 10 <= naive_peak,
             f"recomputing tiled attention's training peak at {at} tokens <= 1/10 of naive: "
             f"{recompute_peak / 2**20:.2f} MB vs {naive_peak / 2**20:.2f} MB = 1/{naive_peak / recompute_peak:.0f} "
             f"(tiled under autograd {tby[(at, 'tiled')]['peak_bytes'] / 2**20:.2f} MB, "
             f"sdpa {tby[(at, 'sdpa')]['peak_bytes'] / 2**20:.2f} MB)"),
            (grad_err <= 1e-5, f"recomputing tiled attention's gradients within 1e-5 of SDPA's at every length: "
                               f"max |err| {grad_err:.2e}"),
        ]

    if "decoding" in parts:
        print(f"\n== Decoding: TinyCausalLM {MODEL}, prompt {PROMPT} tokens, {generated} generated greedily, "
              f"fastest of {args.rounds} rounds per step\n")
        dec = decoding(generated, args.rounds)
        speedups = cumulative_speedups(dec["steps"], CHECKPOINTS + [generated])
        print(f"same tokens with and without the cache: {dec['same_tokens']}; last-step logits differ by at most "
              f"{dec['logit_gap']:.2e}; first generated tokens {dec['tokens']}")
        print(f"cache after {PROMPT + generated - 1} tokens: {dec['cache_bytes'] / 2**20:.2f} MB")
        print(f"{'generated':>9} | {'recompute ms':>12} {'cached ms':>10} | {'speed-up':>8}")
        for n, sp in speedups.items():
            print(f"{n:>9} | {sum(dec['steps'][False][:n]) * 1e3:12.1f} {sum(dec['steps'][True][:n]) * 1e3:10.1f} | "
                  f"{sp:7.1f}x")
        for use_cache in (False, True):
            per = dec["steps"][use_cache]
            print(f"{'cached' if use_cache else 'recompute':>9}: ms per token at step 1 {per[0] * 1e3:.2f}, "
                  f"step {generated // 2} {per[generated // 2 - 1] * 1e3:.2f}, step {generated} {per[-1] * 1e3:.2f}; "
                  f"fastest whole run {dec['totals'][use_cache] * 1e3:.0f} ms")
        whole = dec["totals"][False] / dec["totals"][True]
        lines.append((speedups[generated] >= 5, f"KV-cache decoding >= 5x faster at {generated} generated tokens: "
                                                f"{speedups[generated]:.1f}x (summed fastest steps), {whole:.1f}x "
                                                f"(fastest whole runs)"))

    if "cache" in parts:
        glengths = GROWTH_LENGTHS[:2] if args.quick else GROWTH_LENGTHS
        print(f"\n== Cache growth: TinyCausalLM {MODEL}, one-token steps after n cached tokens, torch.cat against "
              f"a preallocated cache, {GROWTH_STEPS} steps each, alternating\n")
        grows = cache_growth(glengths, GROWTH_STEPS)
        print(f"{'cached':>6} | {'concat ms':>9} {'prealloc ms':>11} | {'ratio':>5} | medians: {'concat':>7} "
              f"{'prealloc':>8}")
        for r in grows:
            print(f"{r['cached_tokens']:>6} | {r['concat_min_ms']:9.3f} {r['preallocated_min_ms']:11.3f} | "
                  f"{r['concat_min_ms'] / r['preallocated_min_ms']:5.2f} | {r['concat_median_ms']:16.3f} "
                  f"{r['preallocated_median_ms']:8.3f}")
        last = grows[-1]
        lines.append((last["preallocated_min_ms"] < last["concat_min_ms"],
                      f"preallocated cache faster than torch.cat after {last['cached_tokens']} tokens: "
                      f"{last['preallocated_min_ms']:.3f} ms vs {last['concat_min_ms']:.3f} ms per token"))
        plengths = PREFILL_LENGTHS[:2] if args.quick else PREFILL_LENGTHS
        print(f"\n== Prefill against decode: prompt through forward_cached at once (fastest of 3), then "
              f"{DECODE_STEPS} one-token steps (fastest)\n")
        pd_rows = prefill_decode(plengths, DECODE_STEPS)
        print(f"{'prompt':>6} | {'prefill ms':>10} {'prefill tok/s':>13} | {'decode ms/tok':>13} "
              f"{'decode tok/s':>12} | {'ratio':>6}")
        for r in pd_rows:
            print(f"{r['prompt_tokens']:>6} | {r['prefill_ms']:10.2f} {r['prefill_tokens_per_s']:13.0f} | "
                  f"{r['decode_ms_per_token']:13.3f} {r['decode_tokens_per_s']:12.0f} | "
                  f"{r['prefill_tokens_per_s'] / r['decode_tokens_per_s']:6.1f}")
        worst = min(r["prefill_tokens_per_s"] / r["decode_tokens_per_s"] for r in pd_rows if r["prompt_tokens"] >= 256)
        lines.append((worst >= 4, f"prefill at least 4x more tokens per second than decode from 256 prompt tokens "
                                   f"on: {worst:.0f}x at worst"))

    if "cache" in parts:
        print(f"\n== One {INTENSITY_DIM} x {INTENSITY_DIM} float32 linear map on n rows at once (fastest of 5)\n")
        wt_rows = weight_throughput(INTENSITY_DIM, INTENSITY_ROWS)
        print(f"{'rows':>5} | {'ms':>8} | {'GFLOP/s':>8} | {'weights GB/s':>12} | {'FLOP/byte':>9}")
        for r in wt_rows:
            print(f"{r['rows']:>5} | {r['ms']:8.2f} | {r['gflop_per_s']:8.1f} | {r['weight_gb_per_s']:12.1f} | "
                  f"{r['flop_per_byte']:9.1f}")
        lines.append((wt_rows[-1]["gflop_per_s"] >= 10 * wt_rows[0]["gflop_per_s"],
                      f"{INTENSITY_ROWS[-1]} rows at once reach at least 10x the GFLOP/s of one row: "
                      f"{wt_rows[-1]['gflop_per_s']:.1f} vs {wt_rows[0]['gflop_per_s']:.1f}"))

    print("\n== Targets (side by side, this run)")
    for ok, text in lines:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    if "memory" in parts:
        print(f"(not a target: at {top} tokens tiled takes {tiled['ms']:.0f} ms, naive {naive['ms']:.0f} ms, "
              f"sdpa {by[(top, 'sdpa')]['ms']:.0f} ms: pure PyTorch tiling saves memory, not time)")

    if args.save:
        stamp = provenance(args.threads)
        written = []
        if "memory" in parts:
            with MEMORY_CSV.open("w", encoding="utf-8") as f:
                f.write(f"# {stamp}\n# one head of {HEAD_DIM} features, batch 1, tiles of {BLOCK} x {BLOCK}; "
                        f"peak_bytes = most bytes alive at once in the CPU allocator during the call "
                        f"(torch.profiler), inputs excluded; ms = fastest of three runs\n")
                f.write("tokens,variant,peak_bytes,largest_intermediate_bytes,max_abs_err_vs_sdpa,ms\n")
                for r in rows:
                    f.write(f"{r['tokens']},{r['variant']},{r['peak_bytes']},{r['largest_intermediate_bytes']},"
                            f"{r['max_abs_err_vs_sdpa']:.3e},{r['ms']:.2f}\n")
            written.append(MEMORY_CSV)
        if "training" in parts:
            with TRAINING_CSV.open("w", encoding="utf-8") as f:
                f.write(f"# {stamp}\n# training = forward + backward (gradients of queries, keys and values), one "
                        f"head of {HEAD_DIM} features, batch 1, tiles of {BLOCK} x {BLOCK}; peak_bytes = most bytes "
                        f"alive at once in the CPU allocator (torch.profiler), inputs excluded; saved_bytes = "
                        f"tensors autograd keeps for the backward pass (inputs included); ms = fastest of two runs\n")
                f.write("tokens,variant,peak_bytes,saved_bytes,max_abs_err_vs_sdpa,max_abs_grad_err_vs_sdpa,ms\n")
                for r in train_rows:
                    f.write(f"{r['tokens']},{r['variant']},{r['peak_bytes']},{r['saved_bytes']},"
                            f"{r['max_abs_err_vs_sdpa']:.3e},{r['max_abs_grad_err_vs_sdpa']:.3e},{r['ms']:.2f}\n")
            written.append(TRAINING_CSV)
        if "decoding" in parts:
            with DECODING_CSV.open("w", encoding="utf-8") as f:
                f.write(f"# {stamp}\n# TinyCausalLM {MODEL}, random weights (seed 0), prompt {PROMPT} tokens, greedy; "
                        f"ms = fastest of {args.rounds} rounds for each step; same tokens both ways: "
                        f"{dec['same_tokens']}\n")
                f.write("step,context_tokens,recompute_ms,cached_ms\n")
                for i, (a, b) in enumerate(zip(dec["steps"][False], dec["steps"][True])):
                    f.write(f"{i + 1},{PROMPT + i},{a * 1e3:.4f},{b * 1e3:.4f}\n")
            written.append(DECODING_CSV)
        if "cache" in parts:
            head = (f"# {stamp}\n# TinyCausalLM {MODEL}, random weights (seed 0)")
            with CACHE_GROWTH_CSV.open("w", encoding="utf-8") as f:
                f.write(f"{head}; caches filled with n = cached_tokens random keys and values, then "
                        f"{GROWTH_STEPS} one-token steps alternating between the two caches; min and median "
                        f"ms per step\n")
                f.write("cached_tokens,concat_min_ms,concat_median_ms,preallocated_min_ms,preallocated_median_ms\n")
                for r in grows:
                    f.write(f"{r['cached_tokens']},{r['concat_min_ms']:.4f},{r['concat_median_ms']:.4f},"
                            f"{r['preallocated_min_ms']:.4f},{r['preallocated_median_ms']:.4f}\n")
            with PREFILL_DECODE_CSV.open("w", encoding="utf-8") as f:
                f.write(f"{head}; prefill = the prompt through forward_cached into an empty cache, fastest of 3; "
                        f"decode = fastest of {DECODE_STEPS} one-token steps after it\n")
                f.write("prompt_tokens,prefill_ms,prefill_tokens_per_s,decode_ms_per_token,decode_tokens_per_s\n")
                for r in pd_rows:
                    f.write(f"{r['prompt_tokens']},{r['prefill_ms']:.3f},{r['prefill_tokens_per_s']:.0f},"
                            f"{r['decode_ms_per_token']:.4f},{r['decode_tokens_per_s']:.0f}\n")
            with INTENSITY_CSV.open("w", encoding="utf-8") as f:
                f.write(f"# {stamp}\n# one {INTENSITY_DIM} x {INTENSITY_DIM} float32 linear map (F.linear) on `rows` "
                        f"rows at once, fastest of 5 runs; flop_per_byte = 2 rows d^2 / (4 (d^2 + 2 rows d))\n")
                f.write("rows,ms,gflop_per_s,weight_gb_per_s,flop_per_byte\n")
                for r in wt_rows:
                    f.write(f"{r['rows']},{r['ms']:.3f},{r['gflop_per_s']:.2f},{r['weight_gb_per_s']:.2f},"
                            f"{r['flop_per_byte']:.2f}\n")
            written += [CACHE_GROWTH_CSV, PREFILL_DECODE_CSV, INTENSITY_CSV]
    if "decoding" in parts and (args.save or args.save_speedups):
        save_speedup_row(dec, speedups, generated, args.threads, args.rounds)
        print(f"wrote the {args.threads}-thread row of {SPEEDUPS_CSV.relative_to(ROOT)}")
    if args.save:
        print("\nwrote " + " and ".join(str(path.relative_to(ROOT)) for path in written))
    return 0

if __name__ == "__main__":
    sys.exit(main())
