"""The numbers that the prose of chapters 9 and 7 quotes from shipped CSV files (issue 41).

Each test reads a CSV that a benchmark wrote (``bench/efficient_*.csv`` for chapter 9,
``attention_course/pretrained/ch07_*.csv`` for chapter 7), computes the number as the notebook
computes it, formats it as the prose writes it, and looks for the sentence in the markdown of
the solution notebook (whitespace ignored). When a benchmark is rerun and a number moves, the
sentence is no longer found and the test fails: the prose must be updated with the table.
"""
import csv
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PRETRAINED = ROOT / "attention_course" / "pretrained"


def _prose(name):
    cells = json.loads((ROOT / "solutions" / name).read_text(encoding="utf-8"))["cells"]
    return " ".join(" ".join("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")


def _table(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    return list(csv.DictReader(line for line in lines if not line.startswith("#")))


def _load_average(path):
    """The 1-minute load average that a benchmark recorded in its header."""
    header = " ".join(line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#"))
    return float(re.search(r"load average at the end ([0-9.]+)", header).group(1))


def _says(text, *phrases):
    for phrase in phrases:
        assert phrase in text, f"the prose no longer says {phrase!r}: update it with the CSV"


@pytest.fixture(scope="module")
def ch09():
    return _prose("09_attention_at_scale.ipynb")


@pytest.fixture(scope="module")
def ch07():
    return _prose("07_bahdanau.ipynb")


# ---------------------------------------------------------------------- chapter 9

def _mb(row, column="peak_bytes"):
    return int(row[column]) / 2**20


def test_ch09_inference_memory_numbers(ch09):
    memory = {(int(r["tokens"]), r["variant"]): r for r in _table(BENCH / "efficient_memory.csv")}
    naive, tiled = _mb(memory[(8192, "naive")]), _mb(memory[(8192, "tiled")])
    _says(ch09, f"({naive:.0f} MB at 8192 tokens for one head)")
    assert naive > 500, naive
    _says(ch09, "at 8192 tokens it needs more than 500 MB", "is about 1/200 of the naive one")
    assert round(naive / tiled, -2) == 200, naive / tiled


def test_ch09_training_memory_numbers(ch09):
    training = {(int(r["tokens"]), r["variant"]): r for r in _table(BENCH / "efficient_training.csv")}
    naive, tiled, recompute = (_mb(training[(4096, name)]) for name in ("naive", "tiled", "recompute"))
    _says(ch09, f"training step of the naive computation peaks at {naive:.0f} MB",
          f"loop under autograd at {tiled:.0f} MB",
          f"needs {recompute:.1f} MB, 1/{naive / recompute:.0f} of the naive peak",
          f"({tiled:.0f} MB against {naive:.0f} MB at 4096 tokens)",
          f"(1/{naive / recompute:.0f} of the naive peak at 4096 tokens)")
    kept = {name: _mb(training[(4096, name)], "saved_bytes") for name in ("recompute", "sdpa")}
    assert f"{kept['recompute']:.2f}" == f"{kept['sdpa']:.2f}", kept
    _says(ch09, f"{kept['sdpa']:.2f} MB in both cases at 4096 tokens")
    # What grows in the peak (inputs excluded) is O, dQ, dK, dV: 4 MB of n x 64 floats at 4096 tokens.
    assert 4 < recompute < 4.5, recompute


def test_ch09_decoding_speed_up_numbers(ch09):
    rows = _table(BENCH / "efficient_decoding.csv")
    recompute, cached = [float(r["recompute_ms"]) for r in rows], [float(r["cached_ms"]) for r in rows]
    after = {n: sum(recompute[:n]) / sum(cached[:n]) for n in (32, 512)}
    _says(ch09, f"{after[32]:.1f}× after 32 tokens and {after[512]:.1f}× after 512")
    one_thread = _table(BENCH / "efficient_decoding_speedups.csv")
    (row,) = [r for r in one_thread if r["threads"] == "1"]
    _says(ch09, f"on one thread of the same machine, {float(row['speedup_after_32']):.1f}× and "
                f"{float(row['speedup_after_512']):.0f}×")
    # The load averages that keep the page from crediting the difference to the threads.
    _says(ch09, f"load average was {_load_average(BENCH / 'efficient_decoding.csv'):.1f} at the end of the "
                f"two-thread run and {float(row['load_average_1min_end']):.1f} at the end of the one-thread run")


def test_ch09_cache_growth_numbers(ch09):
    rows = {int(r["cached_tokens"]): r for r in _table(BENCH / "efficient_cache_growth.csv")}
    longest = rows[16384]
    ratio = float(longest["concat_min_ms"]) / float(longest["preallocated_min_ms"])
    _says(ch09, f"With 16,384 cached tokens a step that concatenates takes {ratio:.1f} times as long")
    first = rows[256]
    assert f"{float(first['concat_min_ms']) / float(first['preallocated_min_ms']):.1f}" == "1.0"
    _says(ch09, "With 256 cached tokens the two are equally fast")


def test_ch09_arithmetic_intensity_numbers(ch09):
    rows = {int(r["rows"]): r for r in _table(BENCH / "efficient_intensity.csv")}
    one, four, most = rows[1], rows[4], rows[256]
    ms1, ms4, ms256 = float(one["ms"]), float(four["ms"]), float(most["ms"])
    g1, g256 = float(one["gflop_per_s"]), float(most["gflop_per_s"])
    _says(ch09, f"With one row the product runs at {g1:.1f} GFLOP/s",
          f"read at {float(one['weight_gb_per_s']):.1f} GB/s, and does {float(one['flop_per_byte']):.1f} "
          f"operations per byte",
          f"With 256 rows it does 256 times the work in about {ms256 / ms1:.0f} times the time, {g256:.1f} GFLOP/s",
          f"({ms4:.1f} ms against {ms1:.1f} ms)",
          f"falls from {float(one['weight_gb_per_s']):.1f} GB/s to {float(four['weight_gb_per_s']):.1f} GB/s")
    assert round(g256 / g1) == 11, g256 / g1
    _says(ch09, "eleven times faster per operation", "runs eleven times faster per operation on 256 rows")
    assert round(ms4 / ms1) == 3, ms4 / ms1
    _says(ch09, "take about three times as long")
    # "every row added raises the operations per byte read, and the speed per operation rises with them"
    ordered = [rows[n] for n in sorted(rows)]
    for column in ("flop_per_byte", "gflop_per_s"):
        values = [float(r[column]) for r in ordered]
        assert values == sorted(values) and len(set(values)) == len(values), (column, values)
    _says(ch09, "every row added raises the operations per byte read, and the speed per operation rises")
    # The conditions that keep the page from reading the rates as memory-bound or compute-bound.
    _says(ch09, f"one thread of a shared 2-core machine at a load average of "
                f"{_load_average(BENCH / 'efficient_intensity.csv'):.1f} (its header)")
    header = (BENCH / "efficient_intensity.csv").read_text(encoding="utf-8")
    assert "torch.set_num_threads(1) on a 2-core" in header, header[:300]


def test_ch09_prefill_and_decode_numbers(ch09):
    rows = {int(r["prompt_tokens"]): r for r in _table(BENCH / "efficient_prefill_decode.csv")}
    prefill = {n: float(r["prefill_tokens_per_s"]) for n, r in rows.items()}
    decode = {n: float(r["decode_tokens_per_s"]) for n, r in rows.items()}
    ratio = {n: prefill[n] / decode[n] for n in rows}
    _says(ch09, f"Decoding runs at {round(min(decode.values()), -1):.0f} to {round(max(decode.values()), -1):.0f} "
                f"tokens per second, prefill at up to {round(max(prefill.values()), -3):,.0f}",
          f"a 256-token prompt goes through {ratio[256]:.0f} times faster per token",
          f"a 16-token prompt gains little ({ratio[16]:.1f}×)",
          f"the ratio falls back ({ratio[1024]:.1f}×)")
    later = [ratio[n] for n in rows if n >= 64]
    _says(ch09, f"processes {min(later):.0f} to {max(later):.0f} times more tokens per second than its decode")


# ---------------------------------------------------------------------- chapter 7

def _grid():
    return _table(PRETRAINED / "ch07_information.csv")


def _steps(results):
    steps = {int(r["steps"]) for r in results}
    return min(steps), max(steps)


def _cell(results, model, steps, n_dates, filler, key="date_acc", group="all"):
    """One grid cell's values, one per seed (accuracies in percent), as the notebook's ``cell`` computes them."""
    scale = 100 if key in ("date_acc", "exact_match") else 1
    return [scale * float(r[key]) for r in results if r["model"] == model and r["group"] == group
            and int(r["steps"]) == steps and int(r["n_dates"]) == n_dates and int(r["filler"]) == filler]


def _mean(values):
    return sum(values) / len(values)


def test_ch07_accuracy_against_the_number_of_dates(ch07):
    results = _grid()
    short, long = _steps(results)
    att = [_mean(_cell(results, "attention", short, n, 0)) for n in (1, 2, 3, 4)]
    base = [_mean(_cell(results, "baseline", short, n, 0)) for n in (1, 2, 3, 4)]
    base_long = [_mean(_cell(results, "baseline", long, n, 0)) for n in (1, 2, 3, 4)]
    exact4 = _mean(_cell(results, "attention", short, 4, 0, "exact_match"))
    per_date = float(f"{att[3]:.1f}") / 100        # the prose raises the printed share to the 4th power
    _says(ch07, f"at {att[3]:.1f} % a date, four independent dates are all right "
                f"{per_date:.3f}⁴ = {100 * per_date ** 4:.1f} %",
          f"{att[0]:.1f} % with attention and {base[0]:.1f} % without",
          f"stays between {min(att):.1f} % and {max(att):.1f} % for one to four dates",
          f"falls to {base[1]:.1f} % of the dates with two dates in the source, {base[2]:.1f} % with three "
          f"and {base[3]:.1f} % with four",
          f"{base_long[0]:.1f} %, {base_long[1]:.1f} %, {base_long[2]:.1f} % and {base_long[3]:.1f} % for one "
          f"to four dates",
          f"gets {exact4:.1f} % of the whole lists right")
    # The four-date row is where the exact match is the per-date chance to the fourth power.
    assert f"{exact4:.1f}" == f"{100 * per_date ** 4:.1f}", (exact4, att[3])


def test_ch07_the_filler_control(ch07):
    results = _grid()
    short, long = _steps(results)
    one60 = {name: _mean(_cell(results, model, steps, 1, 60))
             for name, model, steps in (("att", "attention", short), ("base", "baseline", short),
                                        ("long", "baseline", long))}
    three = [_mean(_cell(results, model, steps, 3, 0)) for model, steps in (("baseline", short), ("baseline", long))]
    seeds60 = _cell(results, "baseline", short, 1, 60)
    two = [_mean(_cell(results, "baseline", short, 2, f)) for f in (0, 20, 40, 60)]
    two_long = [_mean(_cell(results, "baseline", long, 2, f)) for f in (0, 20, 40, 60)]
    lengths = {n: _mean(_cell(results, "attention", short, n, 0, "mean_length")) for n in (1, 3)}
    _says(ch07, f"translates {one60['att']:.1f} % of these dates right and the baseline {one60['base']:.1f} % after "
                f"{short} steps and {one60['long']:.1f} % after {long}",
          f"against {three[0]:.1f} % and {three[1]:.1f} % for three dates",
          f"({_mean(_cell(results, 'baseline', short, 1, 0)):.1f} % without, {one60['base']:.1f} % with 60 characters)",
          f"({min(seeds60):.1f} % to {max(seeds60):.1f} %)",
          f"{min(two):.1f} % to {max(two):.1f} % of the dates after {short} steps, "
          f"{min(two_long):.1f} % to {max(two_long):.1f} % after {long}",
          f"({lengths[3]:.1f} − {lengths[1]:.1f} ≈ {lengths[3] - lengths[1]:.0f} characters), where it gets only "
          f"{three[0]:.1f} % of the dates right")


def test_ch07_shorter_and_longer_halves(ch07):
    results = _grid()
    short, long = _steps(results)
    halves = []
    for model, steps in (("attention", short), ("baseline", short), ("baseline", long)):
        for n in (1, 2, 3, 4):
            halves.append([_mean(_cell(results, model, steps, n, 0, group=g)) for g in ("short", "long")])
    shorter, longer = max(halves, key=lambda pair: abs(pair[0] - pair[1]))
    _says(ch07, f"the largest difference is {abs(shorter - longer):.1f} points",
          f"{shorter:.1f} % for the shorter half, {longer:.1f} % for the longer")
    # "For the attention model the longer half does better in all four rows" (its rows come first)
    assert all(a < b for a, b in halves[:4]), halves[:4]
    _says(ch07, "For the attention model the longer half does better in all four rows")
    longer_better = sum(a < b for a, b in halves)
    assert len(halves) == 12
    _says(ch07, f"over the twelve cells of the table it does better in {longer_better} "
                f"and worse in {sum(a > b for a, b in halves)}")


def test_ch07_learning_curves(ch07):
    curves = _table(PRETRAINED / "ch07_training_curves.csv")
    short, long = _steps(_grid())

    def at(model, step):
        return {r["seed"]: 100 * float(r["val_date_acc"]) for r in curves
                if r["model"] == model and int(r["step"]) == step}

    last_two = sorted({int(r["step"]) for r in curves if r["model"] == "attention"})[-2:]
    before, end = at("attention", last_two[0]), at("attention", last_two[1])
    halfway = at("attention", short // 2)
    _says(ch07, f"at step {short} each is at {min(end.values()):.1f} % or more",
          f"the slowest seed (seed 2) still rose, from {before['2']:.1f} % to {end['2']:.1f} %",
          f"seed 0 fell from {before['0']:.1f} % to {end['0']:.1f} %",
          f"(at step {short // 2} they range from {min(halfway.values()):.1f} % to {max(halfway.values()):.1f} %)")
    assert min(end.values()) == end["0"] and end["2"] > before["2"] and end["0"] < before["0"]
    baseline = [_mean(list(at("baseline", s).values())) for s in (short, (short + long) // 2, long)]
    _says(ch07, f"rises from {baseline[0]:.1f} % at step {short} to {baseline[1]:.1f} % at step "
                f"{(short + long) // 2} and {baseline[2]:.1f} % at step {long}")
