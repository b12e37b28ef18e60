"""The numbers that chapter 10's prose quotes, read from where they come from (issue 42).

Most come from the CSV files of ``bench/today.py`` (``bench/today_*.csv``): each test reads the
table, computes the number as the notebook computes it, formats it as the prose writes it, and
looks for the sentence in the markdown of the solution notebook (whitespace ignored). When the
benchmark is rerun and a number moves, the sentence is no longer found and the test fails: the
prose must be updated with the table. The others are printed by the notebook's own seeded cells
(nbval keeps those outputs true); the last tests read them from the stored outputs and check
what the prose says about them.
"""
import csv
import math
import re
from pathlib import Path

import notebook_text
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
NOTEBOOK = ROOT / "solutions" / "10_attention_today.ipynb"


def _normal(text):
    return notebook_text.normal(text)


@pytest.fixture(scope="module")
def prose():
    return notebook_text.prose(NOTEBOOK)


def _output_of(marker):
    """The stored text output of the one code cell whose source contains ``marker``."""
    return notebook_text.output_of(NOTEBOOK, marker)


def _table(name):
    lines = (BENCH / name).read_text(encoding="utf-8").splitlines()
    return list(csv.DictReader(line for line in lines if not line.startswith("#")))


def _header(name):
    return " ".join(line for line in (BENCH / name).read_text(encoding="utf-8").splitlines() if line.startswith("#"))


def _says(text, *phrases):
    for phrase in phrases:
        assert _normal(phrase) in text, f"the prose no longer says {phrase!r}: update it with its source"


# ---------------------------------------------------------------------- the cache (today_shapes.csv)

@pytest.fixture(scope="module")
def shapes():
    return {row["model"]: row for row in _table("today_shapes.csv")}


def _kib(row):
    return f"{int(row['bytes_per_token_bf16']) / 1024:.1f} KiB"


def test_the_cache_of_published_shapes(prose, shapes):
    llama2, llama3 = shapes["Llama 2 7B"], shapes["Llama 3 8B"]
    assert (llama2["layers"], llama2["kv_heads"], llama2["head_dim"]) == ("32", "32", "128")
    _says(prose, "32 heads of 128 in 32 layers",
          f"{_kib(llama2)} per token, so one sequence of 4k tokens holds {llama2['cache_MiB_at_4k']} MiB of cache, "
          f"and 128k tokens would hold {llama2['cache_MiB_at_128k']} MiB")
    assert llama3["layers"] == llama2["layers"] and llama3["kv_heads"] == "8"
    assert int(llama3["bytes_per_token_bf16"]) * 4 == int(llama2["bytes_per_token_bf16"])
    _says(prose, f"has the same layers but 8 key/value heads: {_kib(llama3)} per token, a quarter")
    v2, v2_mha = shapes["DeepSeek-V2"], shapes["DeepSeek-V2 as MHA"]
    times = int(v2_mha["bytes_per_token_bf16"]) / int(v2["bytes_per_token_bf16"])
    _says(prose, f"its latent cache takes {_kib(v2)} per token; its own shape run as multi-head attention "
                 f"({v2_mha['kv_heads']} heads) would take {_kib(v2_mha)}, {times:.0f} times more")
    assert v2["latent_plus_rope"] == shapes["DeepSeek-V3"]["latent_plus_rope"] == "512+64"
    _says(prose, "(512 + 64 in DeepSeek-V2 and V3)")


def test_what_the_window_does_to_the_cache(prose, shapes):
    mistral, gemma = shapes["Mistral 7B v0.1"], shapes["Gemma 2 2B"]
    assert mistral["bytes_per_token_bf16"] == shapes["Llama 3 8B"]["bytes_per_token_bf16"]
    flat = {mistral[f"cache_MiB_at_{n}"] for n in ("4k", "32k", "128k")}
    assert len(flat) == 1, "Mistral's cache is no longer flat: update the prose"
    _says(prose, f"Mistral 7B v0.1 keeps Llama 3 8B's {_kib(mistral)} per token, but every layer holds at most "
                 f"{mistral['window']} tokens: {flat.pop()} MiB at 4k, 32k and 128k alike")
    _says(prose, f"{gemma['cache_MiB_at_4k']} MiB at 4k, {gemma['cache_MiB_at_32k']} MiB at 32k, "
                 f"{gemma['cache_MiB_at_128k']} MiB at 128k")


# ---------------------------------------------------------------------- decoding (today_decode.csv)

def test_decode_ratios(prose):
    rows = _table("today_decode.csv")
    ratio = {(int(r["context_tokens"]), r["variant"]): r["time_ratio_to_mha"] for r in rows}
    cache = {r["variant"]: r["cache_ratio_to_mha"] for r in rows if r["context_tokens"] == "8192"}
    header = _header("today_decode.csv")
    for setting in ("4 attention layers", "d_model 256, 8 query heads of 32", "gqa 2 key/value heads",
                    "mla latent 64 + rope 16", "swa window 512"):
        assert setting in header, f"the benchmark's setting changed ({setting!r}): update the prose"
    contexts = sorted({c for c, _ in ratio})
    assert (contexts[0], contexts[-1]) == (256, 8192)
    _says(prose, "caches were filled with 256 to 8192 tokens",
          f"Rebuilding the keys and values is {ratio[(256, 'mla')]} times slower than MHA at 256 tokens and "
          f"{ratio[(8192, 'mla')]} times slower at 8192",
          f"Absorbed, MLA took {ratio[(256, 'mla_absorbed')]} of MHA's time at 256 tokens and "
          f"{ratio[(8192, 'mla_absorbed')]} at 8192 while caching {cache['mla_absorbed']} of its bytes",
          f"{ratio[(256, 'swa')]} at 256 tokens", f"{ratio[(8192, 'swa')]} of MHA's time at 8192 tokens")
    gqa = sorted(float(ratio[(c, "gqa")]) for c in contexts)
    _says(prose, f"GQA's step took {gqa[0]:.2f} to {gqa[-1]:.2f} of MHA's")
    assert float(ratio[(256, "swa")]) > 1 and all(float(ratio[(c, "mla_absorbed")]) < 1 for c in contexts)


# ---------------------------------------------------------------------- the delta rule (today_delta.csv)

def test_delta_rule_forms(prose):
    rows = {(int(r["tokens"]), r["form"]): r for r in _table("today_delta.csv")}
    assert "4 heads, d_k = d_v = 32, float32" in _header("today_delta.csv")
    speed = {key: float(rows[(key[0], "recurrent")]["ms"]) / float(row["ms"]) for key, row in rows.items()}
    # "slower than the token loop from 1024 tokens on"
    assert speed[(256, "parallel")] > 1 and speed[(1024, "parallel")] < 1 and speed[(2048, "parallel")] < 1
    _says(prose, "slower than the token loop from 1024 tokens on",
          f"drifts most in float32, {rows[(2048, 'parallel')]['max_abs_diff_vs_recurrent']} at 2048 tokens",
          f"Chunks of 64 ran {speed[(2048, 'chunked_64')]:.0f} times faster than the loop at 2048 tokens and "
          f"stayed within {rows[(2048, 'chunked_64')]['max_abs_diff_vs_recurrent']} of it")
    growth = {form: float(rows[(1024, form)]["ms"]) / float(rows[(256, form)]["ms"]) for form in ("parallel", "recurrent")}
    _says(prose, f"its time grew about {growth['parallel']:.0f}-fold from 256 to 1024 tokens, the loop's "
                 f"{growth['recurrent']:.1f}-fold")
    drift = {form: max(float(rows[(n, form)]["max_abs_diff_vs_recurrent"]) for n in (256, 1024, 2048))
             for form in ("parallel", "chunked_64")}
    assert drift["parallel"] > drift["chunked_64"]


# ---------------------------------------------------------------------- FlexAttention (today_flex.csv)

def test_flex_attention_on_the_cpu(prose):
    rows = {r["mode"]: r for r in _table("today_flex.csv")}
    assert rows["eager"]["ran"] == rows["compiled"]["ran"] == "True"
    assert float(rows["eager"]["max_abs_diff"]) == 0.0
    eager, compiled = (float(rows[m]["ms_1024_tokens"]) / float(rows[m]["reference_ms_1024_tokens"])
                       for m in ("eager", "compiled"))
    _says(prose, f"Eager FlexAttention gave exactly the reference's outputs and took {eager:.2f} times its time",
          f"Compiled, it agreed within {rows['compiled']['max_abs_diff']} and took {compiled:.2f} times the "
          "reference's time")


# ---------------------------------------------------------------------- the notebook's own outputs

def test_layer_pattern_shares(prose):
    out = _output_of("local_per_global in (0, 1, 5)")
    shares = {int(m.group(1)): re.findall(r"'([0-9.]+)'", m.group(2))
              for m in re.finditer(r"^(\d) local per global: .*?(\[.*\])$", out, re.M)}
    _says(prose, f"alternating layers keep {shares[1][1]} of the full cache at 32k tokens and {shares[1][2]} at 128k",
          f"five local layers per global one keep {shares[5][1]} and {shares[5][2]}")


def test_the_sink_toy(prose):
    out = _output_of("the first key: the sink")
    mass = float(re.search(r"weight on position 0, .*: ([0-9.]+)", out).group(1))
    full = float(re.search(r"full attention: mean output size ([0-9.]+)", out).group(1))
    (no_sink, change_none), (sink, change_sink) = (
        (float(a), float(b)) for a, b in re.findall(r"sink: mean output size ([0-9.]+), change from full attention "
                                                    r"([0-9.]+)", out))
    assert 0.75 <= mass < 0.8
    _says(prose, "almost four fifths of a late query's weight goes to position 0")
    assert round(no_sink / full) == 9
    _says(prose, "nine times larger")
    assert sink < full * 1.2 and 0.08 < change_sink / change_none < 0.15
    _says(prose, "the outputs stay the size they were and move by a tenth as much")


def test_latent_cache_and_state_sizes(prose):
    out = _output_of("cache bytes after 10 tokens")
    latent = int(re.search(r"cache bytes after 10 tokens: (\d+)", out).group(1))
    mha = int(re.search(r"multi-head keys and values: +(\d+)", out).group(1))
    numbers = {n // (10 * 4) for n in (latent, mha)}          # 10 tokens, 4 bytes a number
    _says(prose, f"the cache holds {latent // 40} numbers per token instead of {mha // 40}")
    assert numbers == {latent // 40, mha // 40}
    out = _output_of("state_numbers = head_dim * head_dim")
    ratios = dict((int(n), r) for n, r in re.findall(r"^ *(\d+) tokens: .* ratio (\S+)$", out, re.M))
    assert ratios[64] == "1"
    _says(prose, f"the state equals the cache at 64 tokens and is {ratios[131072]} times smaller at 128k tokens")


def test_alibi_step_factor(prose):
    out = _output_of("two_documents = ")
    row = re.search(r"last query, slope 1/2: +tensor\(\[(.*?)\]\)", out, re.S).group(1)
    weights = [float(x) for x in row.replace("\n", " ").split(",")]
    step = weights[-2] / weights[-1]
    assert abs(step - math.exp(-0.5)) < 0.01
    _says(prose, f"multiplies the weight by $e^{{-1/2}}$, about {math.exp(-0.5):.2f}")
